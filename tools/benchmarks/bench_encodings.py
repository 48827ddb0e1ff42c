#!/usr/bin/env python
"""Benchmarks ``dsgraph encode``: time and peak memory at scale, and the RWSE estimator's error.

1. For each dataset (default rmat:20, about 1M nodes and 16M edges), ``dsgraph encode`` computes
   RWSE (``--rwse K``) and, in a separate run, LapPE (``--lappe k``), each in its own process
   watched by ``tools/common/rss_watch.py``: wall time of the whole command (read, compute, write
   a copy of the .npz into the work folder) and its peak RSS (the kernel's VmHWM), ``--repeat``
   times, alternating; and the largest eigenpair residual of the stored LapPE.
2. On a graph where exact RWSE is affordable (default rmat:14), the random-walk estimate for several
   walk counts against the exact values: largest and mean absolute error, RMSE and the worst-case
   standard error 1 / (2 sqrt(W)), with the time of each.

Synthetic datasets are generated into dsgraph's cache first (not timed). Example:

    .venv/bin/python -m tools.benchmarks.bench_encodings --datasets rmat:20 --work /tmp/dsgraph-enc
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

import numpy as np

from tools.common.rss_watch import run_watched


def scale_runs(datasets: list[str], rwse: int, lappe: int, work: str, repeat: int) -> list[dict]:
    """``repeat`` watched ``dsgraph encode`` runs per (dataset, encoding), alternating the two."""
    from dsgraph.graph.datasets import cached_dataset

    rows = []
    for spec in datasets:
        cached_dataset(spec)
        for attempt in range(repeat):
            for option, width in (("--rwse", rwse), ("--lappe", lappe)):
                out = os.path.join(work, f"{spec.replace(':', '_')}_{option[2:]}.npz")
                log = out + ".log"
                watched = run_watched(
                    [sys.executable, "-m", "dsgraph", "encode", spec, option, str(width), "--out", out], log_path=log
                )
                with open(log) as f:
                    compute = re.search(rf"{option[2:]} \[[0-9,]+, {width}\].* in ([0-9.]+)s$", f.read(), re.MULTILINE)
                row = {
                    "dataset": spec,
                    "encoding": f"{option[2:]} {width}",
                    "ok": watched.returncode == 0,
                    "wall_s": watched.seconds,
                    "compute_s": float(compute.group(1)) if compute else float("nan"),
                    "peak_mb": max(watched.peaks(), default=float("nan")),
                    "log": log,
                }
                if option == "--lappe" and attempt == 0 and row["ok"]:
                    row["residual"] = lappe_residual(spec, out)
                rows.append(row)
                if os.path.exists(out):
                    os.remove(out)
    return rows


def lappe_residual(spec: str, out: str) -> float:
    """The largest ||L v - lambda v|| over the stored eigenpairs of the largest component."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    from dsgraph.graph.datasets import cached_dataset
    from dsgraph.graph.encode.lappe import symmetric_weights
    from dsgraph.graph.encode.source import Target, read_adjacency

    w = symmetric_weights(read_adjacency(Target("npz", cached_dataset(spec), "")))
    _, labels = connected_components(w, directed=False)
    nodes = np.flatnonzero(labels == np.bincount(labels).argmax())
    w = w[nodes][:, nodes]
    scale = sp.diags(1.0 / np.sqrt(np.asarray(w.sum(axis=1)).ravel()))
    laplacian = sp.identity(nodes.size) - scale @ w @ scale
    with np.load(out) as f:
        vecs, vals = f["lappe"][nodes].astype(np.float64), f["lappe_eigvals"][nodes[0]].astype(np.float64)
    return float(np.linalg.norm(laplacian @ vecs - vecs * vals, axis=0).max())


def error_runs(spec: str, steps: int, walk_counts: list[int]) -> list[dict]:
    """The estimator against exact RWSE on ``spec``."""
    from dsgraph.graph.datasets import cached_dataset
    from dsgraph.graph.encode.rwse import exact_rwse, walk_rwse
    from dsgraph.graph.encode.source import Target, read_adjacency

    adj = read_adjacency(Target("npz", cached_dataset(spec), ""))
    start = time.perf_counter()
    exact = exact_rwse(adj, steps)
    rows = [{"walks": "exact", "seconds": time.perf_counter() - start}]
    walk_rwse(adj, steps, walks=1)  # compiles the kernel outside the timings
    for walks in walk_counts:
        start = time.perf_counter()
        error = np.abs(walk_rwse(adj, steps, walks=walks) - exact).astype(np.float64)
        rows.append(
            {
                "walks": walks,
                "seconds": time.perf_counter() - start,
                "max": float(error.max()),
                "mean": float(error.mean()),
                "rmse": float(np.sqrt((error**2).mean())),
                "bound": 0.5 / np.sqrt(walks),
                "nodes": adj.num_nodes,
                "edges": adj.num_edges,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.benchmarks.bench_encodings", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--datasets", nargs="*", default=["rmat:20"], help="graphs encoded at scale (default: rmat:20)")
    parser.add_argument("--rwse", type=int, default=16, help="RWSE walk lengths K (default: 16)")
    parser.add_argument("--lappe", type=int, default=8, help="LapPE eigenvectors k (default: 8)")
    parser.add_argument(
        "--error-dataset", default="rmat:14", help="graph for the estimator's error against exact (default: rmat:14)"
    )
    parser.add_argument("--walks", type=int, nargs="*", default=[64, 256, 1024], help="walk counts for the error table")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each scale measurement (default: 3)")
    parser.add_argument("--work", default="/tmp/dsgraph-enc", help="folder for the encoded copies and logs")
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    rows = scale_runs(args.datasets, args.rwse, args.lappe, args.work, args.repeat)
    print(
        f"| dataset | encoding | command wall s, min / median of {args.repeat} | compute s, min / median "
        "| peak RSS MB, max |\n"
        "| --- | --- | --- | --- | --- |"
    )
    for key in dict.fromkeys((r["dataset"], r["encoding"]) for r in rows):
        runs = [r for r in rows if (r["dataset"], r["encoding"]) == key]
        failed = [r["log"] for r in runs if not r["ok"]]
        wall, compute = ([r[name] for r in runs] for name in ("wall_s", "compute_s"))
        print(
            f"| {key[0]} | {key[1]} "
            f"| {min(wall):.1f} / {np.median(wall):.1f}{f' (failed: {failed})' if failed else ''} | "
            f"{min(compute):.1f} / {np.median(compute):.1f} | {max(r['peak_mb'] for r in runs):,.0f} |"
        )
    for r in rows:
        if "residual" in r:
            print(
                f"\n{r['dataset']} {r['encoding']}: largest eigenpair residual ||L v - lambda v|| on the largest "
                f"component {r['residual']:.1e}"
            )
    if args.error_dataset:
        rows = error_runs(args.error_dataset, args.rwse, args.walks)
        print(
            f"\nRWSE estimator against exact on {args.error_dataset} ({rows[1]['nodes']:,} nodes, {rows[1]['edges']:,} "
            "edges), "
            f"K={args.rwse}; exact took {rows[0]['seconds']:.1f}s"
        )
        print(
            "| walks | seconds | max abs error | mean abs error | RMSE | 1/(2 sqrt W) |\n"
            "| --- | --- | --- | --- | --- | --- |"
        )
        for r in rows[1:]:
            print(
                f"| {r['walks']} | {r['seconds']:.2f} | {r['max']:.4f} | {r['mean']:.2e} | {r['rmse']:.2e} "
                f"| {r['bound']:.4f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
