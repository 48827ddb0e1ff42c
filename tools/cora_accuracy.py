#!/usr/bin/env python
"""Trains the default config on Cora for several seeds on 1 and 2 ranks and prints a table of test
accuracy (at the last epoch and at the best validation epoch) and the 1-vs-2-rank difference.

    .venv/bin/python tools/cora_accuracy.py [--config ds_configs/cpu_quickstart.json] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from dsgraph.comm.ports import free_port



def run(config: str, seed: int, ranks: int, out_dir: str) -> dict:
    metrics = os.path.join(out_dir, f"seed{seed}_ranks{ranks}.jsonl")
    launcher = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    cmd = [launcher, f"--num_accelerators={ranks}", f"--master_port={free_port()}", "launch/train.py", "--deepspeed_config", config,
           "--seed", str(seed), "--metrics-out", metrics, "--checkpoint-every", "0"]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(metrics) as f:
        evals = [row for row in map(json.loads, f) if row["kind"] == "eval"]
    return {"last": evals[-1]["test_acc"], "best_val": evals[-1]["test_acc_at_best_val"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="ds_configs/cpu_quickstart.json")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    args = p.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as out_dir:
        for seed in args.seeds:
            for ranks in args.ranks:
                results[seed, ranks] = run(args.config, seed, ranks, out_dir)
                r = results[seed, ranks]
                print(f"seed {seed} ranks {ranks}: test_acc last {100 * r['last']:.1f}%  at best val {100 * r['best_val']:.1f}%", flush=True)
    print(f"\n| ranks | mean test acc (last epoch) | mean test acc (best val epoch) |\n| --- | --- | --- |")
    for ranks in args.ranks:
        last = sum(results[s, ranks]["last"] for s in args.seeds) / len(args.seeds)
        best = sum(results[s, ranks]["best_val"] for s in args.seeds) / len(args.seeds)
        print(f"| {ranks} | {100 * last:.2f}% | {100 * best:.2f}% |")
    if len(args.ranks) >= 2:
        a, b = args.ranks[:2]
        gap = max(abs(results[s, a]["last"] - results[s, b]["last"]) for s in args.seeds)
        print(f"\nlargest per-seed difference between {a} and {b} ranks (last epoch): {100 * gap:.2f} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
