#!/usr/bin/env python
"""Sampled mini-batch training vs full-graph training on Cora (same model, same optimizer, same
number of optimizer steps), and bf16 vs fp32 feature storage, over several seeds.

    .venv/bin/python -m tools.reports.sampled_report [--config ds_configs/cpu_sampled.json] [--seeds 0 1 2]
        [--out runs/sampled_report] [--variants full sampled-fp32 sampled-bf16] [--ranks 1]

Each run is a `deepspeed` launch of launch/train.py with the config's "dsgraph" section adjusted
per variant (full: strategy 'ag' for --full-epochs; sampled: the config's strategy 'sampled' with
feature_dtype float32 or bfloat16). Finished runs are kept in --out and not run again, so the
report can be built up over several invocations (for example one variant per shell). Cora's
features are binary, so bf16 storage is exact there; --dataset rmat:11 compares the storage dtypes on
Gaussian features. Prints a table of mean test accuracy (last epoch and at the best validation
epoch) and feature memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from dsgraph.comm.ports import free_port

VARIANTS = {
    "full": {"strategy": "ag"},
    "sampled-fp32": {"strategy": "sampled", "feature_dtype": "float32"},
    "sampled-bf16": {"strategy": "sampled", "feature_dtype": "bfloat16"},
}


def _evals(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [row for row in map(json.loads, f) if row["kind"] == "eval"]


def run(base: dict, variant: str, seed: int, ranks: int, full_epochs: int, out: str, overrides: dict) -> dict:
    """Runs one (variant, seed) unless its metrics file already ends with the last epoch's eval."""
    config = json.loads(json.dumps(base))
    section = config["dsgraph"]
    section.update(overrides)
    section.update(
        VARIANTS[variant], seed=seed, checkpoint_every=0, timeout_s=3600.0
    )  # a loaded machine is slow, not dead
    if variant == "full":
        section.update(epochs=full_epochs, eval_every=10)
    epochs = section["epochs"]
    metrics = os.path.join(out, f"{variant}_seed{seed}_ranks{ranks}.jsonl")
    log = metrics.replace(".jsonl", ".log")
    section["metrics_out"] = metrics
    config.pop("tensorboard", None)
    evals = _evals(metrics)
    if not evals or evals[-1]["epoch"] != epochs - 1:
        path = metrics.replace(".jsonl", ".json")
        with open(path, "w") as f:
            json.dump(config, f, indent=1)
        launcher = os.path.join(os.path.dirname(sys.executable), "deepspeed")
        cmd = [
            launcher,
            f"--num_accelerators={ranks}",
            f"--master_port={free_port()}",
            "launch/train.py",
            "--deepspeed_config",
            path,
        ]
        with open(log, "w") as f:
            subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT)
        evals = _evals(metrics)
    memory = None
    with open(log) as f:
        for line in f:
            if "features " in line and " MB (" in line:  # the sampled trainer's set-up line
                memory = float(line.split("features ")[1].split(" MB")[0])
    return {"last": evals[-1]["test_acc"], "best_val": evals[-1]["test_acc_at_best_val"], "feature_mb": memory}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--config", default="ds_configs/cpu_sampled.json", help='DeepSpeed JSON with a sampled "dsgraph" section'
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    p.add_argument("--ranks", type=int, default=1, help="ranks per run (default 1)")
    p.add_argument("--full-epochs", type=int, default=200, help="full-graph epochs (one step each; default 200)")
    p.add_argument("--out", default="runs/sampled_report", help="folder for per-run configs, logs and metrics")
    p.add_argument(
        "--dataset", help="override the config's dataset (for example rmat:11, whose features are not binary)"
    )
    p.add_argument("--epochs", type=int, help="override the config's sampled epochs")
    p.add_argument("--batch-size", type=int, dest="batch_size", help="override the config's batch_size")
    p.add_argument(
        "--eval-every", type=int, dest="eval_every", help="override the config's sampled eval_every (epochs)"
    )
    args = p.parse_args(argv)
    with open(args.config) as f:
        base = json.load(f)
    overrides = {
        k: getattr(args, k) for k in ("dataset", "epochs", "batch_size", "eval_every") if getattr(args, k) is not None
    }
    os.makedirs(args.out, exist_ok=True)
    results = {}
    for variant in args.variants:
        for seed in args.seeds:
            r = results[variant, seed] = run(base, variant, seed, args.ranks, args.full_epochs, args.out, overrides)
            print(
                f"{variant} seed {seed}: test_acc last {100 * r['last']:.1f}%  at best val {100 * r['best_val']:.1f}%",
                flush=True,
            )
    print(
        "\n| variant | mean test acc (last epoch) | mean test acc (best val epoch) | per-seed (last) | feature memory |"
    )
    print("| --- | --- | --- | --- | --- |")
    mean = {}
    for variant in args.variants:
        rs = [results[variant, s] for s in args.seeds]
        mean[variant] = sum(r["last"] for r in rs) / len(rs)
        best = sum(r["best_val"] for r in rs) / len(rs)
        per_seed = " / ".join(f"{100 * r['last']:.1f}" for r in rs)
        mem = f"{rs[0]['feature_mb']:.1f} MB" if rs[0]["feature_mb"] is not None else "n/a (model input)"
        print(f"| {variant} | {100 * mean[variant]:.2f}% | {100 * best:.2f}% | {per_seed} | {mem} |")
    for a, b in (("sampled-fp32", "full"), ("sampled-bf16", "full"), ("sampled-bf16", "sampled-fp32")):
        if a in mean and b in mean:
            print(f"{a} - {b}: {100 * (mean[a] - mean[b]):+.2f} points (mean test acc, last epoch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
