"""``dsgraph train``: starts ``deepspeed`` with dsgraph's training module on P local ranks."""

from __future__ import annotations

import argparse
import os
import shutil
import sys


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="dsgraph train",
        description="Launch training with the deepspeed launcher; other options go to the training script "
        "(see `python launch/train.py --help`).",
    )
    p.add_argument(
        "--nprocs", type=int, default=2, help="ranks on this machine (GPUs when present, else CPU processes)"
    )
    p.add_argument("--config", default="ds_configs/cpu_quickstart.json", help='DeepSpeed JSON with a "dsgraph" section')
    args, rest = p.parse_known_args(argv)
    run_deepspeed("dsgraph.train.main", args.nprocs, ["--deepspeed_config", args.config, *rest])


def run_deepspeed(module: str, nprocs: int, args: list[str]) -> None:
    """Replaces this process with ``deepspeed --num_accelerators=nprocs --module module *args`` (the
    deepspeed next to this Python when it is not on PATH)."""
    launcher = shutil.which("deepspeed") or os.path.join(os.path.dirname(sys.executable), "deepspeed")
    cmd = [launcher, f"--num_accelerators={nprocs}", "--module", module, *args]
    print("dsgraph: running", " ".join(cmd), flush=True)
    os.execv(cmd[0], cmd)
