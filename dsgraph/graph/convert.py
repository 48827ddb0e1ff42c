"""``dsgraph convert INPUT OUTPUT``: bring your own graph into dsgraph's formats.

INPUT is an OGB node-property folder, an edge list (.txt/.csv/.tsv/.edges/.el, optionally .gz) or a
.npz (dsgraph's layout, or the benchmark layout ``edges`` [E, 2] + ``node_features`` +
``node_labels`` + ``train_masks``/``val_masks``/``test_masks`` [S, N], whose S splits a .npz output
keeps); edge features (OGB's raw/edge-feat, a .npz's edge_attr or edge_features, an edge list's
extra columns with ``--edge-features``) go to the output with their edges; OUTPUT is a .npz (the
format ``--dataset PATH.npz`` reads) or a folder, which becomes a partition store (``--parts``,
``--method``) like ``dsgraph partition`` writes. Prints a summary (nodes, edges, degree statistics,
isolated nodes, classes, split sizes) and, with ``--histogram FILE.png``, plots the degree
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
        default="metis",
        help="partition store output: partition method, as in dsgraph partition (default: metis)",
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

        parts = partition_nodes(result.graph, args.parts, args.method, args.seed)
        graph, perm, node_ranges = relabel(result.graph, parts, args.parts)
        write_store(
            graph,
            perm,
            node_ranges,
            output,
            args.method,
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
