#!/usr/bin/env python
"""Benchmarks `dsgraph partition` and per-rank loading of the partition store.

1. Every method on each dataset into 2 and 4 parts, each run in its own subprocess: wall time, time
   of the partitioning step alone, peak RSS (from wait4's rusage of that child only) and the quality
   figures the command writes with --stats-json.
2. Peak RSS of a process that loads one rank's part of a 4-part store and touches every array,
   against a process that loads the whole graph from the same data (load_dataset on the .npz), and
   against a process that only imports dsgraph (the floor both share).

Synthetic datasets (rmat:...) are generated once and saved as .npz in the work folder, so each run
measures partitioning, not generation. Example:

    .venv/bin/python -m tools.benchmarks.bench_partition --datasets cora rmat:20 --work /tmp/dsgraph-bench
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
METHODS = ("metis", "random", "contiguous", "balanced")

TOUCH_PART = """
import sys
import numpy as np
from dsgraph.graph.store import load_part
part = load_part(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
total = 0.0
for name in ("rowptr", "col", "x", "y", "train_mask", "val_mask", "test_mask", "halo"):
    total += float(np.asarray(getattr(part, name)).sum(dtype=np.float64))
print(part.num_local_nodes, part.num_local_edges, total)
"""

TOUCH_WHOLE = """
import sys
from dsgraph.graph import load_dataset
graph = load_dataset(sys.argv[1])
total = 0.0
for name in ("rowptr", "col", "x", "y", "train_mask", "val_mask", "test_mask"):
    total += float(getattr(graph, name).double().sum())
print(graph.num_nodes, graph.num_edges, total)
"""

IMPORT_ONLY = "import dsgraph.graph.store, dsgraph.graph.datasets"


def run_measured(cmd: list[str]) -> tuple[float, float, str]:
    """Runs ``cmd``; returns (wall seconds, peak RSS in MB of that child alone, stdout)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        began = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # rusage of this child only
        wall = time.perf_counter() - began
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stderr[-3000:]}")
    return wall, usage.ru_maxrss / 1024, stdout


def dataset_file(spec: str, work: str) -> str:
    """A bundled name stays as is; a synthetic spec is generated once into work/<spec>.npz."""
    if not spec.startswith("rmat:"):
        return spec
    path = os.path.join(work, spec.replace(":", "_") + ".npz")
    if not os.path.exists(path):
        code = (
            "import sys; from dsgraph.graph import load_dataset, save_npz; "
            "save_npz(load_dataset(sys.argv[1]), sys.argv[2])"
        )
        wall, rss, _ = run_measured([sys.executable, "-c", code, spec, path])
        print(f"generated {spec} -> {path} in {wall:.1f}s (peak RSS {rss:.0f} MB)", flush=True)
    return path


def bench_partition(spec: str, data: str, parts: int, method: str, work: str, metis_balance: str = "nodes") -> dict:
    label = method if method != "metis" or metis_balance == "nodes" else f"metis/{metis_balance}"
    out = os.path.join(work, f"{spec.replace(':', '_')}-{label.replace('/', '_')}-{parts}")
    stats_path = out + ".stats.json"
    cmd = [
        sys.executable,
        "-m",
        "dsgraph",
        "partition",
        "--dataset",
        data,
        "--parts",
        str(parts),
        "--method",
        method,
        "--metis-balance",
        metis_balance,
        "--out",
        out,
        "--force",
        "--quiet",
        "--stats-json",
        stats_path,
    ]
    wall, rss, _ = run_measured(cmd)
    with open(stats_path) as f:
        stats = json.load(f)
    return {
        "dataset": spec,
        "method": label,
        "parts": parts,
        "wall_s": wall,
        "partition_s": stats["timings_s"]["partition"],
        "peak_rss_mb": rss,
        "store": out,
        **stats["quality"],
    }


def print_partition_table(rows: list[dict]) -> None:
    print(
        "\n| dataset | parts | method | wall s | partition s | peak RSS MB | edge cut % | node bal | edge bal "
        "| halo per part |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        halos = " / ".join(f"{h:,}" for h in r["halo_sizes"])
        print(
            f"| {r['dataset']} | {r['parts']} | {r['method']} | {r['wall_s']:.1f} | {r['partition_s']:.1f} | "
            f"{r['peak_rss_mb']:.0f} | {r['edge_cut_pct']:.2f} | {r['node_balance']:.3f} | "
            f"{r['edge_balance']:.3f} | {halos} |",
            flush=True,
        )


def bench_loading(spec: str, data: str, store: str, parts: int) -> None:
    _, floor, _ = run_measured([sys.executable, "-c", IMPORT_ONLY])
    _, whole, _ = run_measured([sys.executable, "-c", TOUCH_WHOLE, data])
    print(f"\nper-rank loading of {store} ({spec}, {parts} parts) vs the whole graph; peak RSS in MB")
    print("| process | peak RSS MB | share of whole-graph load |")
    print("| --- | --- | --- |")
    print(f"| python + import dsgraph only | {floor:.0f} | {floor / whole:.1%} |")
    print(f"| whole graph: load_dataset({os.path.basename(data)}) + touch | {whole:.0f} | 100% |")
    for rank in range(parts):
        _, rss, out = run_measured([sys.executable, "-c", TOUCH_PART, store, str(rank), str(parts)])
        nodes, edges, _ = out.split()
        print(
            f"| rank {rank}: load_part + touch ({int(nodes):,} nodes, {int(edges):,} edges) | {rss:.0f} | "
            f"{rss / whole:.1%} |",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--datasets", nargs="+", default=["cora", "rmat:20"], help="dataset specs (default: cora rmat:20)"
    )
    parser.add_argument("--parts", nargs="+", type=int, default=[2, 4], help="part counts (default: 2 4)")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument(
        "--metis-balance",
        nargs="+",
        choices=("nodes", "edges"),
        default=["nodes", "edges"],
        help="run metis once per choice; 'edges' rows are labelled metis/edges (default: both)",
    )
    parser.add_argument("--work", default="/tmp/dsgraph-bench-partition", help="folder for datasets and stores")
    parser.add_argument(
        "--load-method",
        default="metis",
        choices=METHODS,
        help="method of the store used for the loading comparison (default: metis)",
    )
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)

    rows = []
    for spec in args.datasets:
        data = dataset_file(spec, args.work)
        for parts in args.parts:
            for method in args.methods:
                for balance in args.metis_balance if method == "metis" else ["nodes"]:
                    rows.append(bench_partition(spec, data, parts, method, args.work, balance))
                    print(
                        f"done {spec} {parts} {rows[-1]['method']}: {rows[-1]['wall_s']:.1f}s",
                        file=sys.stderr,
                        flush=True,
                    )
    print_partition_table(rows)

    biggest = args.datasets[-1]
    parts = max(args.parts)
    store = next(
        (
            r["store"]
            for r in rows
            if r["dataset"] == biggest and r["parts"] == parts and r["method"] == args.load_method
        ),
        None,
    )
    if store is not None:
        bench_loading(biggest, dataset_file(biggest, args.work), store, parts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
