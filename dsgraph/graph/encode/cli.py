"""``dsgraph encode GRAPH --rwse K --lappe k``: compute node encodings once and store them beside
the features, in the dataset's ``.npz`` or in every part of a partition store (docs/guides/encodings.md).

Examples::

    dsgraph encode rmat:20 --rwse 16 --lappe 8          # into the cached rmat:20 file
    dsgraph encode cora --rwse 16 --lappe 8 --out cora_enc.npz
    dsgraph encode parts/rmat20-4 --rwse 16             # a partition store, in place
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from dsgraph.graph.encode import lappe as lap
from dsgraph.graph.encode import rwse as walks
from dsgraph.graph.encode.source import Target, read_adjacency, resolve
from dsgraph.graph.encode.write import write_npz_arrays, write_store_arrays


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsgraph encode",
        description="Compute node encodings (RWSE, LapPE) once and store them beside the features: into the "
        "dataset's .npz or into every part of a partition store (which also gets every node's in/out degree).",
        epilog="A run uses them through the model's 'encodings' option, for example \"model\": {\"encodings\": "
        "[\"rwse\", \"lappe\", \"degree\"]}; 'degree' needs no precomputation.",
    )
    parser.add_argument("graph", metavar="GRAPH", help="cora, rmat:SCALE[:EDGE_FACTOR], a path to a .npz, or a partition store folder")
    parser.add_argument("--rwse", type=int, metavar="K", help="random-walk return probabilities for walk lengths 1..K (array 'rwse' [N, K])")
    parser.add_argument("--lappe", type=int, metavar="k",
                        help="the k lowest non-trivial Laplacian eigenvectors of each connected component and their "
                        "eigenvalues (arrays 'lappe' and 'lappe_eigvals' [N, k])")
    parser.add_argument("--out", metavar="PATH.npz", help="write a copy with the encodings here (default: the dataset's own "
                        "file, changed in place; needed for the bundled cora)")
    parser.add_argument("--seed", type=int, default=0, help="seed of a synthetic dataset such as rmat, as the training "
                        "config's seed (default: 0)")
    parser.add_argument("--rwse-method", choices=walks.METHODS, default="auto",
                        help="exact (K sparse products per block of nodes, work K*E*N), walks (Monte-Carlo estimate), "
                        "or auto: exact while K*E*N <= --rwse-max-exact-work (default: auto)")
    parser.add_argument("--rwse-walks", type=int, default=walks.DEFAULT_WALKS,
                        help=f"walks per node of the estimator (default: {walks.DEFAULT_WALKS}; error ~ 1/sqrt(walks))")
    parser.add_argument("--rwse-max-exact-work", type=float, default=walks.MAX_EXACT_WORK,
                        help=f"auto: the largest K*E*N computed exactly (default: {walks.MAX_EXACT_WORK:g})")
    parser.add_argument("--rwse-seed", type=int, default=0, help="seed of the estimator's walks (default: 0)")
    parser.add_argument("--lappe-tol", type=float, default=lap.DEFAULT_TOL,
                        help=f"eigensolver tolerance for components above --lappe-dense-max nodes (default: {lap.DEFAULT_TOL:g})")
    parser.add_argument("--lappe-maxiter", type=int, default=lap.DEFAULT_MAXITER,
                        help=f"ARPACK restarts (tripled on its retry) and LOBPCG iterations (default: {lap.DEFAULT_MAXITER})")
    parser.add_argument("--lappe-dense-max", type=int, default=lap.DENSE_MAX,
                        help=f"components up to this many nodes are solved densely (default: {lap.DENSE_MAX})")
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
    n, show = adjacency.num_nodes, not args.quiet
    if args.rwse is not None:
        method = walks.choose_method(adjacency, args.rwse, args.rwse_method, args.rwse_max_exact_work)
        update, bar = _bar(show, n, f"rwse ({method})")
        start = time.perf_counter()
        arrays["rwse"], _ = walks.rwse(adjacency, args.rwse, method=method, walks=args.rwse_walks, seed=args.rwse_seed,
                                       progress=update)  # fmt: skip
        if bar is not None:
            bar.close()
        detail = f"{args.rwse_walks} walks per node" if method == "walks" else "exact"
        log(f"rwse [{n:,}, {args.rwse}] ({detail}) in {time.perf_counter() - start:.1f}s")
    if args.lappe is not None:
        settings = lap.SolverSettings(tol=args.lappe_tol, maxiter=args.lappe_maxiter, dense_max=args.lappe_dense_max)
        update, bar = _bar(show, n, "lappe")
        start = time.perf_counter()
        status = bar.set_postfix_str if bar is not None else None
        arrays["lappe"], arrays["lappe_eigvals"], sizes = lap.lappe(adjacency, args.lappe, settings, progress=update, log=log,
                                                                    status=status)  # fmt: skip
        if bar is not None:
            bar.close()
        log(f"lappe [{n:,}, {args.lappe}] over {sizes.size:,} connected components (largest {int(sizes.max()):,} nodes, "
            f"{int((sizes == 1).sum()):,} isolated) in {time.perf_counter() - start:.1f}s")  # fmt: skip
    return arrays


def _check(args, target: Target) -> None:
    if args.rwse is None and args.lappe is None and target.kind == "npz":
        raise ValueError("nothing to compute: pass --rwse K and/or --lappe k")
    for flag, value in (("--rwse", args.rwse), ("--lappe", args.lappe), ("--rwse-walks", args.rwse_walks),
                        ("--lappe-maxiter", args.lappe_maxiter), ("--lappe-dense-max", args.lappe_dense_max)):  # fmt: skip
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")
    if not args.lappe_tol > 0:
        raise ValueError(f"--lappe-tol must be > 0, got {args.lappe_tol}")


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
            arrays["degree"] = adjacency.degrees()
            write_store_arrays(target.out, arrays)
        else:
            write_npz_arrays(target.path, arrays, target.out)
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph encode: {err}", file=sys.stderr)
        return 1
    shapes = ", ".join(f"{name} {list(a.shape)}" for name, a in arrays.items())
    print(f"wrote {shapes} into {target.out} in {time.perf_counter() - began:.1f}s")
    return 0
