#!/usr/bin/env python
"""Training step time of graph-parallel strategies beside each other, through the training command.

    python -m tools.benchmarks.bench_strategies --dataset rmat:17 --ranks 1 --strategies ag ag_ring --rounds 3

Each round trains every strategy once (the order alternates between rounds, so slow drifts of a
shared machine hit every strategy alike) with ``deepspeed --num_accelerators R launch/train.py``
for ``--epochs`` epochs on a config made from ``--config`` (fp32 unless ``--bf16``, no evaluation
until the last epoch, TensorBoard off), and reads the step rows of its metrics file. The first
``--warmup`` steps of a run are left out. It prints min and median step time per strategy and their
ratio to the first strategy, and writes the samples as JSON with ``--json-out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "ds_configs" / "cpu_quickstart.json"), help="base DeepSpeed config")
    p.add_argument("--dataset", default="rmat:17", help="cora | rmat:SCALE[:EF] | PATH.npz (default rmat:17)")
    p.add_argument("--strategies", nargs="+", default=["ag", "ag_ring"], help="the first is the baseline of the ratios")
    p.add_argument("--ranks", type=int, default=1, help="CPU ranks per run (deepspeed --num_accelerators)")
    p.add_argument("--epochs", type=int, default=8, help="training steps per run (default 8)")
    p.add_argument("--warmup", type=int, default=2, help="first steps of a run left out (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="runs per strategy, alternating (default 3)")
    p.add_argument("--bf16", action="store_true", help="train in bf16 (default fp32)")
    p.add_argument("--json-out", dest="json_out", help="write every step time here")
    return p.parse_args(argv)


def write_config(args, folder: str) -> str:
    with open(args.config) as f:
        config = json.load(f)
    config.update(bf16={"enabled": bool(args.bf16)}, tensorboard={"enabled": False})
    config["dsgraph"].update(
        dataset=args.dataset,
        epochs=args.epochs,
        eval_every=args.epochs,
        checkpoint_every=0,
        checkpoint_dir=os.path.join(folder, "checkpoints"),
    )
    path = os.path.join(folder, "config.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def run_once(args, config: str, strategy: str, metrics: str) -> list[float]:
    """Step times (s) of one training run after its warm-up steps."""
    cmd = [
        str(Path(sys.executable).with_name("deepspeed")),
        "--num_accelerators",
        str(args.ranks),
        str(ROOT / "launch/train.py"),
        "--deepspeed_config",
        config,
        "--strategy",
        strategy,
        "--metrics-out",
        metrics,
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"{strategy}: training failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    with open(metrics) as f:
        rows = [json.loads(line) for line in f]
    return [r["step_time_s"] for r in rows if r["kind"] == "step"][args.warmup :]


def main(argv=None) -> int:
    args = parse_args(argv)
    samples: dict[str, list[float]] = {s: [] for s in args.strategies}
    with tempfile.TemporaryDirectory() as folder:
        config = write_config(args, folder)
        for r in range(args.rounds):
            order = args.strategies if r % 2 == 0 else args.strategies[::-1]
            for strategy in order:
                samples[strategy] += run_once(args, config, strategy, os.path.join(folder, f"{strategy}_{r}.jsonl"))
    base = args.strategies[0]
    base_min, base_med = min(samples[base]), statistics.median(samples[base])
    print(
        f"{args.dataset}, {args.ranks} rank(s), {'bf16' if args.bf16 else 'fp32'}, {args.rounds} alternating rounds of "
        f"{args.epochs} steps ({args.warmup} left out each)\n"
    )
    print(
        f"| strategy | steps | min ms | median ms | min / {base} min | median / {base} median |\n"
        "| --- | --- | --- | --- | --- | --- |"
    )
    for strategy, times in samples.items():
        lo, mid = min(times), statistics.median(times)
        print(
            f"| {strategy} | {len(times)} | {lo * 1e3:.0f} | {mid * 1e3:.0f} | {lo / base_min:.2f} "
            f"| {mid / base_med:.2f} |"
        )
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"args": vars(args), "step_time_s": samples}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
