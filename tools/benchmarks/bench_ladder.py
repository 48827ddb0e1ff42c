"""The scale ladder: one full-graph training run per R-MAT rung, timed as a user runs it.

    python -m tools.benchmarks.bench_ladder --rungs rmat:16,rmat:17,rmat:18 --nprocs 2 \\
        --config ds_configs/cpu_general.json --epochs 3 --json-out ladder.json --plot ladder.png

For each rung, in order: the graph is built into the dataset cache by itself (``cached_dataset``,
timed: the "build" column; with ``--fresh`` a cached file is deleted first), then ``dsgraph train
--nprocs P --config CONFIG --dataset RUNG --epochs E`` runs as a subprocess (timed from launch to
exit: the "run" column). From its metrics: the median step time of rank 0's step rows after the
first (a warm-up), and the ``forecast`` row's peak per rank against the memory model's prediction.
Time per edge is that median step over the rung's directed edges (self loops included, as the
ranks hold them). The summary fits step time = a * E^k over the rungs (least squares in log-log
space): time per edge grows as E^(k - 1), and the ratio of the largest rung's time per edge to the
first rung's is printed beside it. A rung whose run fails is recorded with its exit code and the
tail of its output, and the next rung runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NOTE = "dsgraph: predicted peak"  # the run's memory check changed its config (train/main.py's _fit_memory)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rungs", required=True, help="comma list of synthetic graphs, e.g. rmat:16,rmat:18")
    p.add_argument("--config", default="ds_configs/cpu_general.json")
    p.add_argument("--nprocs", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3, help="full-graph steps per rung (the first is left out)")
    p.add_argument("--fresh", action="store_true", help="delete each rung's cached graph first (time its build)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds for one rung's training run")
    p.add_argument("--json-out", help="write every rung's figures and the fit here")
    p.add_argument("--plot", help="PNG of time per edge against edges")
    p.add_argument("train_args", nargs="*", help="more options for dsgraph train (after --)")
    return p.parse_args(argv)


def build(rung: str, fresh: bool) -> tuple[str, float]:
    """The rung's cached dataset file and the seconds its build took (about 0 when it was cached)."""
    from dsgraph.graph.datasets import cached_dataset, dataset_file

    cached, exists = dataset_file(rung)
    if fresh and exists:
        os.remove(cached)
    began = time.perf_counter()
    path = cached_dataset(rung)
    return path, time.perf_counter() - began


def directed_edges(path: str) -> tuple[int, int]:
    """(nodes, in-edges with a self loop on every row that has none) of a dataset file."""
    from dsgraph.graph.rank_reader import DatasetFile

    f = DatasetFile(path)
    degree = f.in_degrees(self_loops=True)
    return f.num_nodes, int(degree.sum())


def train(rung: str, args: argparse.Namespace, metrics: Path) -> tuple[int, float, str]:
    """Runs ``dsgraph train`` on the rung; (exit code, seconds from launch to exit, its output)."""
    cmd = [sys.executable, "-m", "dsgraph", "train", "--nprocs", str(args.nprocs), "--config", args.config]
    cmd += ["--dataset", rung, "--epochs", str(args.epochs), "--eval-every", str(args.epochs)]
    cmd += ["--metrics-out", str(metrics), *args.train_args]
    began = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        code, text = out.returncode, out.stdout + out.stderr
    except subprocess.TimeoutExpired as err:
        code, text = 124, f"timed out after {args.timeout:.0f} s\n{err.stdout or ''}"
    return code, time.perf_counter() - began, text


def read_metrics(path: Path) -> dict:
    """Median step time after the first, and the forecast row's peaks, from a run's metrics file."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    steps = [r["step_time_s"] for r in rows if r.get("kind") == "step"]
    forecast = next((r for r in rows if r.get("kind") == "forecast"), {})
    steady = steps[1:] or steps
    return {
        "step_times_s": steps,
        "median_step_s": statistics.median(steady) if steady else None,
        "peak_mem_mb_per_rank": forecast.get("measured_peak_mem_mb_per_rank"),
        "predicted_peak_mem_mb": forecast.get("predicted_peak_mem_mb"),
        "peak_mem_error": forecast.get("peak_mem_error"),
    }


def run_rung(rung: str, args: argparse.Namespace, scratch: Path) -> dict:
    path, build_s = build(rung, args.fresh)
    nodes, edges = directed_edges(path)
    metrics = scratch / f"{rung.replace(':', '_')}.jsonl"
    code, run_s, output = train(rung, args, metrics)
    row = {"rung": rung, "nodes": nodes, "edges": edges, "build_s": build_s, "run_s": run_s, "exit_code": code}
    row["notes"] = [line for line in output.splitlines() if line.startswith(NOTE)]  # e.g. checkpointing turned on
    if code != 0 or not metrics.exists():
        return {**row, "output_tail": output[-3000:]}
    row.update(read_metrics(metrics))
    if row["median_step_s"]:
        row["ns_per_edge"] = row["median_step_s"] / edges * 1e9
    return row


def fit(rows: list[dict]) -> dict | None:
    """step time = a * E^k over the rungs that ran (least squares in log-log space)."""
    done = [r for r in rows if r.get("ns_per_edge")]
    if len(done) < 2:
        return None
    x = [math.log(r["edges"]) for r in done]
    y = [math.log(r["median_step_s"]) for r in done]
    mx, my = statistics.fmean(x), statistics.fmean(y)
    k = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)
    return {
        "exponent": k,
        "first": done[0]["rung"],
        "last": done[-1]["rung"],
        "per_edge_growth": done[-1]["ns_per_edge"] / done[0]["ns_per_edge"],
    }


def table(rows: list[dict], summary: dict | None) -> str:
    lines = [
        "| rung | nodes | edges | build s | run s | median step s | ns per edge | peak MB per rank | predicted MB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in rows:
        if r["exit_code"] != 0:
            lines.append(
                f"| {r['rung']} | {r['nodes']:,} | {r['edges']:,} | {r['build_s']:.1f} | failed ({r['exit_code']}) |"
            )
            continue
        peaks = " / ".join(f"{p:,.0f}" for p in r.get("peak_mem_mb_per_rank") or [])
        predicted = r.get("predicted_peak_mem_mb")
        lines.append(
            f"| {r['rung']} | {r['nodes']:,} | {r['edges']:,} | {r['build_s']:.1f} | {r['run_s']:.1f} | "
            f"{r['median_step_s']:.2f} | {r.get('ns_per_edge', float('nan')):.0f} | {peaks} | "
            f"{'-' if predicted is None else format(predicted, ',.0f')} |"
        )
    if summary:
        lines.append(
            f"\nstep time ~ E^{summary['exponent']:.3f}: time per edge grows as E^{summary['exponent'] - 1:+.3f}; "
            f"{summary['last']} / {summary['first']} time per edge: {summary['per_edge_growth']:.2f}x"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if r.get("ns_per_edge")]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["edges"] for r in done], [r["ns_per_edge"] for r in done], "o-")
    for r in done:
        ax.annotate(r["rung"], (r["edges"], r["ns_per_edge"]), textcoords="offset points", xytext=(4, 4))
    ax.set_xscale("log")
    ax.set_xlabel("directed edges (self loops included)")
    ax.set_ylabel("median step time per edge (ns)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    args = parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="dsgraph-ladder-") as scratch:
        for rung in args.rungs.split(","):
            row = run_rung(rung.strip(), args, Path(scratch))
            rows.append(row)
            print(f"bench_ladder: {row['rung']}: exit {row['exit_code']}, run {row['run_s']:.1f} s", flush=True)
            if args.json_out:  # after every rung: a later failure keeps the finished ones
                Path(args.json_out).write_text(json.dumps({"rows": rows, "fit": fit(rows)}, indent=1) + "\n")
    summary = fit(rows)
    print(table(rows, summary))
    if args.plot:
        plot(rows, args.plot)
    return 0 if all(r["exit_code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
