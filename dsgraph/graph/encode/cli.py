"""``dsgraph encode GRAPH --rwse K --lappe k``: compute node encodings once and store them beside
the features, in the dataset's ``.npz`` or in every part of a partition store (docs/guides/encodings.md).

Examples::

    dsgraph encode rmat:20 --rwse 16 --lappe 8          # into the cached rmat:20 file
    dsgraph encode cora --rwse 16 --lappe 8 --out cora_enc.npz
    dsgraph encode parts/rmat20-4 --rwse 16             # a partition store, in place
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from dsgraph.graph.encode.source import Target, read_adjacency, resolve
from dsgraph.graph.encode.write import write_npz_arrays, write_store_arrays
from dsgraph.graph.encodings import counted, csr_edges, specs


def _stored():
    """The specs of the encodings this command computes (``dsgraph/graph/encodings/``)."""
    return [spec for spec in specs() if spec.stored]


def build_parser() -> argparse.ArgumentParser:
    titles = ", ".join(spec.title or spec.name for spec in _stored())
    counted_names = " and ".join(repr(spec.name) for spec in specs() if not spec.stored)
    parser = argparse.ArgumentParser(
        prog="dsgraph encode",
        description=f"Compute node encodings ({titles}) once and store them beside the features: into the "
        "dataset's .npz or into every part of a partition store (which also gets every node's in/out degree).",
        epilog='A run uses them through the model\'s \'encodings\' option, for example "model": {"encodings": '
        f"{json.dumps([spec.name for spec in specs()])}}}; {counted_names} needs no precomputation.",
    )
    parser.add_argument(
        "graph", metavar="GRAPH", help="cora, rmat:SCALE[:EDGE_FACTOR], a path to a .npz, or a partition store folder"
    )
    for spec in _stored():
        parser.add_argument(f"--{spec.name}", type=int, metavar=spec.metavar, help=spec.help)
    parser.add_argument(
        "--out",
        metavar="PATH.npz",
        help="write a copy with the encodings here (default: the dataset's own "
        "file, changed in place; needed for the bundled cora)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of a synthetic dataset such as rmat, as the training config's seed (default: 0)",
    )
    for spec in _stored():
        spec.add_settings(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bars or messages")
    return parser


def _bar(enabled: bool, total: int, desc: str):
    """(a progress callback taking a node count, the bar to close) on stderr, or no-ops."""
    if not enabled:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit="node", unit_scale=True, file=sys.stderr)
    return bar.update, bar


def compute(args, adjacency, log) -> dict[str, np.ndarray]:
    """The encodings the arguments ask for, by array name (float32 [N, w] each)."""
    arrays = {}
    for spec in _stored():
        width = getattr(args, spec.name)
        if width is not None:
            arrays.update(
                spec.compute(adjacency, width, args, lambda desc: _bar(not args.quiet, adjacency.num_nodes, desc), log)
            )
    return arrays


def _check(args, target: Target) -> None:
    stored = _stored()
    if all(getattr(args, spec.name) is None for spec in stored) and target.kind == "npz":
        raise ValueError(f"nothing to compute: pass {' and/or '.join(f'--{s.name} {s.metavar}' for s in stored)}")
    for spec in stored:
        width = getattr(args, spec.name)
        if width is not None and width < 1:
            raise ValueError(f"--{spec.name} must be at least 1, got {width}")
        spec.check_settings(args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    began = time.perf_counter()

    def log(message: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - began:7.1f}s] {message}", file=sys.stderr, flush=True)

    try:
        target = resolve(args.graph, args.out, args.seed)
        _check(args, target)
        log(f"reading the graph of {target.path}")
        adjacency = read_adjacency(target)
        log(f"{adjacency.num_nodes:,} nodes, {adjacency.num_edges:,} edges")
        arrays = compute(args, adjacency, log)
        if target.kind == "store":
            arrays.update(counted(csr_edges(adjacency.in_ptr, adjacency.in_col), adjacency.num_nodes))
            write_store_arrays(target.out, arrays)
        else:
            write_npz_arrays(target.path, arrays, target.out)
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph encode: {err}", file=sys.stderr)
        return 1
    shapes = ", ".join(f"{name} {list(a.shape)}" for name, a in arrays.items())
    print(f"wrote {shapes} into {target.out} in {time.perf_counter() - began:.1f}s")
    return 0
