"""``dsgraph convert INPUT OUTPUT``: bring your own graph into dsgraph's formats.

INPUT is an OGB node-property folder, an edge list (.txt/.csv/.tsv/.edges/.el, optionally .gz) or a
.npz (dsgraph's layout, or the benchmark layout ``edges`` [E, 2] + ``node_features`` +
``node_labels`` + ``train_masks``/``val_masks``/``test_masks`` [S, N], whose S splits a .npz output
keeps); edge features (OGB's raw/edge-feat, a .npz's edge_attr or edge_features, an edge list's
extra columns with ``--edge-features``) go to the output with their edges; OUTPUT is a .npz (the
format ``--dataset PATH.npz`` reads) or a folder, which becomes a partition store (``--parts``,
``--method``) like ``dsgraph partition`` writes. An edge list or OGB folder larger than the
memory budget (``--memory-gb``, by default half the available memory; or ``--out-of-core``) is
converted without its edges (or features) in memory (``convert_stream.py``: sorted runs on disk,
a streamed .npz, balanced ranges for a store), and the command says so. Prints a summary (nodes,
edges, degree statistics, isolated nodes, classes, split sizes) and, with ``--histogram FILE.png``, plots the degree
distribution (needs matplotlib: ``pip install dsgraph[plot]``).

Example::

    dsgraph convert soc-edges.txt.gz soc.npz --symmetrize --dedup --drop-self-loops --relabel
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import numpy as np

from dsgraph.graph.ingest import FORMATS, CleanupOptions, Ingested, read_graph
from dsgraph.graph.npz import save_npz
from dsgraph.graph.partition import METHODS
from dsgraph.graph.summary import format_summary, save_degree_histogram


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsgraph convert",
        description="Convert an OGB folder, an edge list or a .npz into dsgraph's .npz or a partition store.",
        epilog="Edge lists without --features/--labels get x = ones [N, 1], y = -1 and empty split masks.",
    )
    parser.add_argument("input", help="OGB node-property folder, edge list (.txt/.csv/.tsv/.edges/.el[.gz]) or .npz")
    parser.add_argument("output", help="OUTPUT.npz, or a folder for a partition store")
    parser.add_argument("--format", choices=FORMATS, default="auto", help="input format (default: from the path)")
    parser.add_argument("--symmetrize", action="store_true", help="add the reverse v->u of every edge u->v")
    parser.add_argument("--drop-self-loops", action="store_true", help="leave out edges u->u")
    parser.add_argument("--dedup", action="store_true", help="keep one copy of repeated edges")
    parser.add_argument(
        "--relabel",
        action="store_true",
        help="edge lists: number the distinct node ids 0..N-1 in ascending order "
        "and write each node's original id to OUTPUT.node_ids.npy (OUTPUT without .npz)",
    )
    parser.add_argument("--features", metavar="FILE.npy", help="edge lists: node features [N, F]")
    parser.add_argument("--labels", metavar="FILE.npy", help="edge lists: integer node labels [N] (-1 = unlabelled)")
    parser.add_argument(
        "--edge-features",
        action="store_true",
        help="edge lists: the numeric columns after SOURCE DESTINATION are edge features (edge_attr)",
    )
    parser.add_argument("--split", metavar="NAME", help="OGB: the split scheme under split/ (needed if several)")
    parser.add_argument("--name", help="dataset name (default: from INPUT)")
    parser.add_argument("--parts", type=int, default=1, help="partition store output: number of parts (default: 1)")
    parser.add_argument(
        "--method",
        choices=METHODS,
        help="partition store output: partition method, as in dsgraph partition (default: metis in memory, "
        "balanced out of core)",
    )
    parser.add_argument(
        "--out-of-core",
        action="store_true",
        help="edge lists and OGB folders: convert without the edges (or features) in memory (sorted runs on "
        "disk; chosen by itself when the input is predicted not to fit --memory-gb)",
    )
    parser.add_argument(
        "--memory-gb",
        type=float,
        help="edge lists and OGB folders: memory the in-memory conversion may use (default: half the available memory)",
    )
    parser.add_argument("--seed", type=int, default=0, help="partition store output: partition seed (default: 0)")
    parser.add_argument("--force", action="store_true", help="replace an existing OUTPUT")
    parser.add_argument("--histogram", metavar="FILE.png", help="also plot the in- and out-degree distribution")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    began = time.perf_counter()
    try:
        _check_output(args.output, args.force)
        streamed = _out_of_core(args)
        if streamed:
            return _convert_streamed(args, streamed, began)
        if args.histogram and importlib.util.find_spec("matplotlib") is None:
            raise ImportError("--histogram needs matplotlib: pip install 'dsgraph[plot]'")
        result = read_graph(
            args.input,
            format=args.format,
            cleanup=CleanupOptions(symmetrize=args.symmetrize, drop_self_loops=args.drop_self_loops, dedup=args.dedup),
            relabel=args.relabel,
            features=args.features,
            labels=args.labels,
            split=args.split,
            name=args.name,
            edge_features=args.edge_features,
        )
        read_s = time.perf_counter() - began
        written = _write(result, args)
        if args.histogram:
            save_degree_histogram(result.graph, args.histogram)
            written.append(args.histogram)
    except (ValueError, FileNotFoundError, FileExistsError, ImportError) as err:
        print(f"dsgraph convert: {err}", file=sys.stderr)
        return 1
    print(format_summary(result))
    print(f"read in {read_s:.1f}s, total {time.perf_counter() - began:.1f}s; wrote {', '.join(written)}")
    return 0


def _check_output(output: str, force: bool) -> None:
    if output.endswith(".npz"):
        if os.path.exists(output) and not force:
            raise FileExistsError(f"{output}: exists; pass --force to replace it")
    elif os.path.isfile(output):
        raise ValueError(f"{output}: OUTPUT must end in .npz or name a folder for a partition store")


def _write(result: Ingested, args: argparse.Namespace) -> list[str]:
    """Writes the .npz or the partition store, plus OUTPUT.node_ids.npy (without .npz) when the
    edge list was relabelled; returns the paths written."""
    output = args.output
    if output.endswith(".npz"):
        save_npz(result.graph, output, masks=result.all_splits)  # every fixed split of an [S, N] input
    else:
        from dsgraph.graph.partition import partition_nodes, relabel
        from dsgraph.graph.store import write_store

        method = args.method or "metis"
        parts = partition_nodes(result.graph, args.parts, method, args.seed)
        graph, perm, node_ranges = relabel(result.graph, parts, args.parts)
        write_store(
            graph,
            perm,
            node_ranges,
            output,
            method,
            dataset=result.graph.name,
            seed=args.seed,
            overwrite=args.force,
        )
    written = [output]
    if result.node_ids is not None:
        ids_path = os.path.normpath(output.removesuffix(".npz")) + ".node_ids.npy"
        np.save(ids_path, result.node_ids, allow_pickle=False)
        written.append(ids_path)
    return written


MIN_LINE_BYTES = 4  # the shortest edge line: "0 1\n"
LINE_BYTES = 100
"""The in-memory conversion into a .npz per edge line: the parsed pairs, their keys and the CSR
(an OGB folder of 67M lines, symmetrized to 134M edges, peaked at 3,573 MB: 53 bytes a line). A
store partitioned in memory needs ``partition_choice.EDGE_BYTES`` per edge instead."""
OUT_OF_CORE_FORMATS = ("edgelist", "ogb")


def _out_of_core(args: argparse.Namespace) -> str | None:
    """The input's format when it is to be converted without its edges in memory (asked for, or an
    edge list or OGB folder predicted over the budget; says which and why), else None. ValueError for
    an input or an option out of core cannot take."""
    from dsgraph.graph.ingest import detect_format

    fmt = detect_format(args.input) if args.format == "auto" else args.format
    if fmt not in OUT_OF_CORE_FORMATS:
        if args.out_of_core:
            raise ValueError(
                f"--out-of-core converts edge lists and OGB folders; {args.input} is {fmt}, read in memory"
            )
        return None
    if not args.out_of_core:
        from dsgraph.graph.partition_choice import default_budget

        budget = int(args.memory_gb * 2**30) if args.memory_gb else default_budget()
        metis = not args.output.endswith(".npz") and args.method in (None, "metis")  # a store by METIS
        needed = _in_memory_bytes(args.input, fmt, args.split, budget, metis)
        if needed is None:
            return None
        print(
            f"dsgraph convert: {args.input} needs about {needed / 2**30:.1f} GB in memory, over the budget of "
            f"{budget / 2**30:.1f} GB (--memory-gb): converting out of core",
            flush=True,
        )
    _check_out_of_core_options(args, fmt)
    return fmt


def _in_memory_bytes(path: str, fmt: str, split: str | None, budget: int, metis: bool) -> int | None:
    """The in-memory conversion's estimated peak (``LINE_BYTES`` per edge line, or with ``metis``, a
    store partitioned in memory, ``partition_choice.EDGE_BYTES``; plus the node arrays and three copies
    of the features for an OGB folder), or None when it fits ``budget`` (decided from the file's size,
    without counting its lines, where that suffices)."""
    from dsgraph.graph.partition_choice import EDGE_BYTES, GraphSize, in_memory_bytes

    per_line = EDGE_BYTES if metis else LINE_BYTES
    from dsgraph.graph.readers import count_lines

    nodes = None
    if fmt == "ogb":
        from dsgraph.graph.ogb import feature_width, ogb_files

        files = ogb_files(path, split=split)
        edges, nodes = files.edges, (files.num_nodes, feature_width(files.node_features))
    else:
        edges = path
    node_bytes = 0 if nodes is None else in_memory_bytes(GraphSize(nodes[0], 0, nodes[1], None))
    if not edges.endswith(".gz") and os.path.getsize(edges) // MIN_LINE_BYTES * per_line + node_bytes <= budget:
        return None  # fits even if every line were as short as can be: no counting pass over the file
    needed = count_lines(edges) * per_line + node_bytes
    return None if needed <= budget else needed


def _check_out_of_core_options(args: argparse.Namespace, fmt: str) -> None:
    """ValueError naming the options an out-of-core conversion of ``fmt`` cannot take."""
    if fmt == "ogb":
        options = ("--relabel", args.relabel), ("--features", args.features), ("--labels", args.labels)
        given = [flag for flag, value in (*options, ("--edge-features", args.edge_features)) if value]
        if given:
            raise ValueError(f"{args.input}: {', '.join(given)} apply to edge lists only (OGB names its arrays)")
    elif args.split is not None:
        raise ValueError(f"{args.input}: a split scheme (--split) applies to OGB folders only")
    refused = [f for f, on in (("--relabel", args.relabel), ("--edge-features", args.edge_features)) if on]
    refused += ["--histogram"] * bool(args.histogram)
    if refused:
        raise ValueError(f"out of core, {', '.join(refused)} cannot be done (they need the edge list in memory)")
    if args.method not in (None, "balanced", "contiguous"):
        raise ValueError(f"out of core, a store's parts are balanced or contiguous ranges, not --method {args.method}")


def _convert_streamed(args: argparse.Namespace, fmt: str, began: float) -> int:
    """The edge list or OGB folder (``fmt``) into a .npz (or through a scratch .npz into a partition
    store), out of core."""
    from dsgraph.graph.convert_stream import convert_edge_list_streamed, convert_ogb_streamed
    from dsgraph.runtime.host_memory import fix_mmap_threshold

    fix_mmap_threshold()  # freed chunks go back to the system instead of growing the heap

    store = not args.output.endswith(".npz")
    parent = os.path.dirname(os.path.abspath(args.output.rstrip("/")))
    npz = os.path.join(parent, f".{os.path.basename(args.output.rstrip('/'))}.converting.npz") if store else args.output
    options = dict(symmetrize=args.symmetrize, drop_self_loops=args.drop_self_loops, dedup=args.dedup)
    scheme = None
    try:
        if fmt == "ogb":
            stats, scheme = convert_ogb_streamed(
                args.input, npz, split=args.split, **options, scratch=parent, progress=True
            )
        else:
            stats = convert_edge_list_streamed(
                args.input, npz, **options, features=args.features, labels=args.labels, scratch=parent, progress=True
            )
        if store:
            from dsgraph.graph.store_stream import write_store_streamed

            name = args.name or os.path.basename(os.path.normpath(args.input)).split(".")[0]
            write_store_streamed(
                npz,
                args.parts,
                args.method or "balanced",
                args.output,
                scratch=parent,
                dataset=name,
                overwrite=args.force,
                progress=True,
            )
    finally:
        if store and os.path.exists(npz):
            os.remove(npz)
    print("\n".join(stats.lines_summary(args.input)))
    if scheme is not None:
        print(f"  split: {scheme}")
    print(f"total {time.perf_counter() - began:.1f}s; wrote {args.output}")
    return 0
