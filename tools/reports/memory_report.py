#!/usr/bin/env python
"""Per-rank peak memory of full-graph training by strategy, rank count, layer count and activation
checkpointing, on one R-MAT graph; a JSON of every run and a plot.

    python -m tools.reports.memory_report --dataset rmat:15 --json-out runs/memory/report.json \
        --plot runs/memory/report.png
    python -m tools.reports.memory_report --dataset rmat:18 --strategies ag,ag_ring --ranks 1,4 --layers 2 \
        --checkpointing off
    # one table and plot of earlier runs:
    python -m tools.reports.memory_report --merge a.json,b.json --json-out all.json --plot all.png
    python -m tools.reports.memory_report --dataset rmat:18 --strategies ag --ranks 1,4 --layers 2 \
        --checkpointing off --set '{"parallel": {"regather_kv": true, "comm_chunks": 8}}'

Each run is the training command (``python -m deepspeed.launcher.runner --num_accelerators P
launch/train.py``, CPU ranks, fp32, ZeRO-2, hidden 128, 8 heads by default, dropout 0.1) for
``--epochs`` epochs with evaluation only after the last one. Per run it records rank 0's
``peak_mem_mb`` from the metrics (peak RSS of the process on the CPU, ``ru_maxrss``) and every
rank's peak RSS (VmHWM, read from /proc while the ranks run: tools/common/rss_watch.py), their max and
mean, and ``host_ratio``: the max per-rank peak RSS over the same strategy's (else ag's) 1-rank
run with the same layers and checkpointing. Strategies that cannot run a case (a2a with a head
count the ranks do not divide) are skipped with the reason. Hold the measurement lock around it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from tools.common.bench import write_json  # noqa: E402
from tools.common.rss_watch import run_watched  # noqa: E402

LOCAL_RANK = re.compile(r"--local_rank=(\d+)")


def parse_args(argv=None) -> argparse.Namespace:
    from dsgraph.parallel import strategy_names

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="rmat:15", help="rmat:SCALE[:EF] (default rmat:15)")
    p.add_argument(
        "--strategies",
        default="ag,a2a,halo,ag_ring",
        help=f"comma list from {', '.join(strategy_names())} (default ag,a2a,halo,ag_ring)",
    )
    p.add_argument("--ranks", default="1,2,4", help="comma list of rank counts (default 1,2,4)")
    p.add_argument("--layers", default="2,4", help="comma list of layer counts (default 2,4)")
    p.add_argument("--checkpointing", default="off,on", help="comma list from off,on (default both)")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--epochs", type=int, default=2, help="training epochs per run (default 2)")
    p.add_argument(
        "--set",
        dest="settings",
        default="{}",
        metavar="JSON",
        help='more "dsgraph" settings for every run, a JSON object, e.g. '
        '\'{"parallel": {"regather_kv": true, "comm_chunks": 8}}\'',
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run (default 900)")
    p.add_argument("--port", type=int, default=29690, help="master port of the runs")
    p.add_argument("--json-out", default="runs/memory/report.json")
    p.add_argument("--plot", default="runs/memory/report.png", help="PNG of peak RSS per rank (needs matplotlib)")
    p.add_argument("--merge", help="comma list of this tool's JSON files: no runs, one table, JSON and plot of theirs")
    args = p.parse_args(argv)
    if not args.dataset.startswith("rmat:"):
        p.error(f"--dataset must be an R-MAT graph rmat:SCALE[:EF], got '{args.dataset}'")
    unknown = set(args.strategies.split(",")) - set(strategy_names())
    if unknown:
        p.error(f"unknown strategies {sorted(unknown)}; choose from {', '.join(strategy_names())}")
    try:
        args.settings = json.loads(args.settings)
    except json.JSONDecodeError as err:
        p.error(f"--set takes a JSON object: {err}")
    if not isinstance(args.settings, dict):
        p.error(f"--set takes a JSON object, got {args.settings!r}")
    if set(args.checkpointing.split(",")) - {"off", "on"}:
        p.error(f"--checkpointing takes off and/or on, got '{args.checkpointing}'")
    return args


def write_run_config(folder: Path, **settings) -> Path:
    """``folder``/config.json: the CPU quick-start DeepSpeed config in fp32 without TensorBoard, its
    dsgraph section updated with dropout 0.1 only after attention, metrics and checkpoints in
    ``folder``, and ``settings``."""
    config = json.loads((ROOT / "ds_configs/cpu_quickstart.json").read_text())
    config["bf16"], config["tensorboard"] = {"enabled": False}, {"enabled": False}
    config["dsgraph"].update(
        dropout=0.1,
        input_dropout=0.0,
        attention_dropout=0.0,
        metrics_out=str(folder / "metrics.jsonl"),
        checkpoint_dir=str(folder / "ckpt"),
        **settings,
    )
    path = folder / "config.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def run_config(args, folder: Path, strategy: str, ranks: int, layers: int, checkpointed: bool) -> Path:
    """The DeepSpeed JSON of one run (the CPU quick-start config with the run's settings)."""
    return write_run_config(
        folder,
        **{
            **dict(
                dataset=args.dataset,
                strategy=strategy,
                hidden=args.hidden,
                heads=args.heads,
                layers=layers,
                epochs=args.epochs,
                eval_every=args.epochs,
                checkpoint_activations=checkpointed,
            ),
            **args.settings,
        },
    )


def measure(args, strategy: str, ranks: int, layers: int, checkpointed: bool) -> dict:
    from dsgraph.parallel import get_strategy

    case = {"strategy": strategy, "ranks": ranks, "layers": layers, "checkpointing": checkpointed}
    reason = get_strategy(strategy).infeasible(args.heads, ranks)
    if reason:
        return {**case, "status": "skipped", "reason": reason}
    folder = Path(tempfile.mkdtemp(prefix="dsgraph-memory-"))
    cmd = [
        sys.executable,
        "-m",
        "deepspeed.launcher.runner",
        "--master_port",
        str(args.port),
        "--num_accelerators",
        str(ranks),
        str(ROOT / "launch/train.py"),
        "--deepspeed_config",
        str(run_config(args, folder, strategy, ranks, layers, checkpointed)),
        "--backend",
        "cpu",
        "--seed",
        "0",
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1", DS_ACCELERATOR="cpu")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    watched = run_watched(
        cmd, log_path=str(folder / "log.txt"), timeout=args.timeout, match="launch/train.py", env=env, cwd=str(ROOT)
    )
    metrics = folder / "metrics.jsonl"
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.is_file() else []
    steps = [r for r in rows if r.get("kind") == "step"]
    per_rank: dict[int, float] = {}  # a process forked by a rank carries its command line: the rank is the largest
    for pid, tag in watched.tags.items():
        if (m := LOCAL_RANK.search(tag)) and pid in watched.peak_mb:
            per_rank[int(m.group(1))] = max(per_rank.get(int(m.group(1)), 0.0), watched.peak_mb[pid])
    result = {**case, "settings": args.settings, "seconds": watched.seconds, "log": str(folder / "log.txt")}
    if watched.returncode != 0 or len(steps) < args.epochs or len(per_rank) != ranks:
        return {
            **result,
            "status": "timeout" if watched.timed_out else "failed",
            "log_tail": (folder / "log.txt").read_text()[-2000:],
        }
    peaks = [per_rank[r] for r in sorted(per_rank)]
    return {
        **result,
        "status": "ok",
        "peak_mem_mb": max(r["peak_mem_mb"] for r in steps),
        "rank_peak_rss_mb": peaks,
        "max_rank_peak_rss_mb": max(peaks),
        "mean_rank_peak_rss_mb": sum(peaks) / len(peaks),
        "losses": [r["loss"] for r in steps],
    }


def add_ratios(results: list[dict]) -> None:
    """host_ratio: max per-rank peak RSS over the 1-rank run of the same strategy (else ag's), same
    layers and checkpointing."""
    one = {
        (r["strategy"], r["layers"], r["checkpointing"]): r["max_rank_peak_rss_mb"]
        for r in results
        if r["status"] == "ok" and r["ranks"] == 1
    }
    for r in results:
        if r["status"] != "ok":
            continue
        base = one.get((r["strategy"], r["layers"], r["checkpointing"])) or one.get(
            ("ag", r["layers"], r["checkpointing"])
        )
        r["host_ratio"] = r["max_rank_peak_rss_mb"] / base if base else None


def table(results: list[dict]) -> str:
    lines = [
        "| strategy | ranks | layers | checkpointing | peak_mem_mb (rank 0) | peak RSS per rank, max / mean MB "
        "| vs 1 rank |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        head = f"| {r['strategy']} | {r['ranks']} | {r['layers']} | {'on' if r['checkpointing'] else 'off'} |"
        if r["status"] != "ok":
            lines.append(f"{head} {r['status']}: {r.get('reason', '')} | | |")
            continue
        ratio = f"{r['host_ratio']:.0%}" if r.get("host_ratio") else "-"
        lines.append(
            f"{head} {r['peak_mem_mb']:,.0f} | {r['max_rank_peak_rss_mb']:,.0f} / {r['mean_rank_peak_rss_mb']:,.0f} "
            f"| {ratio} |"
        )
    return "\n".join(lines)


def plot(results: list[dict], path: str, title: str) -> str:
    """One panel per (layers, checkpointing): max per-rank peak RSS against ranks, a line per strategy."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (
            "no plot: matplotlib is not installed in this environment (pip install matplotlib); "
            "the JSON has every figure"
        )
    ok = [r for r in results if r["status"] == "ok"]
    panels = sorted({(r["layers"], r["checkpointing"]) for r in ok})
    if not panels:
        return "no plot: no run finished"
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), sharey=True, squeeze=False)
    for ax, (layers, checkpointed) in zip(axes[0], panels):
        for strategy in dict.fromkeys(r["strategy"] for r in ok):
            points = sorted(
                (r["ranks"], r["max_rank_peak_rss_mb"])
                for r in ok
                if (r["strategy"], r["layers"], r["checkpointing"]) == (strategy, layers, checkpointed)
            )
            if points:
                ax.plot(*zip(*points), marker="o", label=strategy)
        ax.set_title(f"{layers} layers, checkpointing {'on' if checkpointed else 'off'}", fontsize=9)
        ax.set_xlabel("ranks")
        ax.set_xticks(sorted({r["ranks"] for r in ok}))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("peak RSS per rank (max), MB")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return f"plot: {path}"


def merged(paths: list[str]) -> dict:
    """One payload of earlier reports (same dataset and shape), their runs in file order."""
    payloads = [json.loads(Path(path).read_text()) for path in paths]
    keys = {(p["dataset"], p["hidden"], p["heads"], p["epochs"]) for p in payloads}
    if len(keys) != 1:
        raise SystemExit(
            f"memory_report --merge: the files are of different runs (dataset, hidden, heads, epochs): {sorted(keys)}"
        )
    return {**payloads[0], "runs": [r for p in payloads for r in p["runs"]]}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.merge:
        payload = merged(args.merge.split(","))
        add_ratios(payload["runs"])
        write_json(args.json_out, payload)
        print(table(payload["runs"]))
        print(
            plot(
                payload["runs"],
                args.plot,
                f"{payload['dataset']}, hidden {payload['hidden']}, {payload['heads']} heads, fp32, CPU ranks",
            )
        )
        return 0
    from dsgraph.graph.datasets import cached_dataset

    cached_dataset(args.dataset)  # generated once here, so no run's peak includes the generator
    grid = itertools.product(
        args.strategies.split(","),
        map(int, args.ranks.split(",")),
        map(int, args.layers.split(",")),
        [c == "on" for c in args.checkpointing.split(",")],
    )
    payload = {
        "format": "dsgraph-memory-report",
        "dataset": args.dataset,
        "hidden": args.hidden,
        "heads": args.heads,
        "dtype": "fp32",
        "epochs": args.epochs,
        "settings": args.settings,
        "runs": [],
    }
    for case in grid:
        payload["runs"].append(measure(args, *case))
        add_ratios(payload["runs"])
        write_json(args.json_out, payload)
        print(table(payload["runs"][-1:]).splitlines()[-1], flush=True)
    print(table(payload["runs"]))
    print(
        plot(payload["runs"], args.plot, f"{args.dataset}, hidden {args.hidden}, {args.heads} heads, fp32, CPU ranks")
    )
    return 0 if all(r["status"] in ("ok", "skipped") for r in payload["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
