#!/usr/bin/env python
"""Bytes and accuracy of compressed exchanges: trains a config on several seeds with each
'comm_dtype' (and int8 gradients too) and prints, per setting, the bytes a training step sends
(the ``comm_bytes`` of the step rows, as a share of the uncompressed run's) and the test accuracy at
the best-validation epoch (mean and standard deviation over the seeds, and its difference from
the uncompressed run).

    .venv/bin/python -m tools.reports.compression_report [--config ds_configs/cpu_quickstart.json] \\
        [--strategy ag] [--ranks 2] [--seeds 0 1 2] [--json-out runs/compression.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

from tools.reports.cora_accuracy import train_rows, write_variant

SETTINGS = {  # name: (comm_dtype, comm_grad_dtype)
    "none": ("none", "none"),
    "bf16": ("bf16", "none"),
    "int8": ("int8", "none"),
    "int8 + int8 grads": ("int8", "int8"),
}


def variant(config: str, strategy: str, comm_dtype: str, grad_dtype: str, out_dir: str) -> str:
    with open(config) as f:  # keep the base config's other parallel settings
        parallel = json.load(f).get("dsgraph", {}).get("parallel", {})
    keys = {"strategy": strategy, "parallel": {**parallel, "comm_dtype": comm_dtype, "comm_grad_dtype": grad_dtype}}
    return write_variant(config, out_dir, f"{strategy}_{comm_dtype}_{grad_dtype}", keys)


def train(config: str, seed: int, ranks: int, out_dir: str) -> dict:
    """One run: its mean bytes per training step and its test accuracy at the best-validation epoch."""
    rows = train_rows(config, seed, ranks, out_dir)
    steps = [r["comm_bytes"] for r in rows if r["kind"] == "step"]
    evals = [r for r in rows if r["kind"] == "eval"]
    return {"bytes_per_step": sum(steps) / len(steps), "best_val": evals[-1]["test_acc_at_best_val"]}


def report(results: dict[str, list[dict]]) -> list[str]:
    base_bytes = statistics.mean(r["bytes_per_step"] for r in results["none"])
    base_acc = statistics.mean(r["best_val"] for r in results["none"])
    lines = [
        "| comm setting | MB per step | share of none | test acc (best val), mean ± std | vs none (points) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, runs in results.items():
        mb = statistics.mean(r["bytes_per_step"] for r in runs)
        accs = [100 * r["best_val"] for r in runs]
        std = statistics.stdev(accs) if len(accs) > 1 else 0.0
        lines.append(
            f"| {name} | {mb / 1e6:.2f} | {mb / base_bytes:.1%} | {statistics.mean(accs):.2f} ± {std:.2f} | "
            f"{statistics.mean(accs) - 100 * base_acc:+.2f} |"
        )
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="ds_configs/cpu_quickstart.json")
    p.add_argument("--strategy", default="ag", help="the graph-parallel strategy whose exchanges are compressed")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--json-out", help="also write the per-run results here")
    args = p.parse_args(argv)
    if args.ranks < 2:
        p.error("--ranks must be >= 2: one rank exchanges nothing")
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="dsgraph-compression-") as out_dir:
        for seed in args.seeds:  # seed-major: machine noise and drift hit every setting alike
            for name, (comm, grad) in SETTINGS.items():
                run = train(variant(args.config, args.strategy, comm, grad, out_dir), seed, args.ranks, out_dir)
                results.setdefault(name, []).append({"seed": seed, **run})
                print(
                    f"seed {seed} {name:>18}: {run['bytes_per_step'] / 1e6:.2f} MB/step, test acc "
                    f"{run['best_val']:.3f}",
                    flush=True,
                )
    print(f"\n{args.config}, strategy {args.strategy}, {args.ranks} ranks, seeds {args.seeds}\n")
    print("\n".join(report(results)))
    if args.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump(
                {"config": args.config, "strategy": args.strategy, "ranks": args.ranks, "results": results}, f, indent=1
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
