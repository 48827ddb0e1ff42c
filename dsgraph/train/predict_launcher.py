"""``dsgraph predict``: starts ``deepspeed`` with dsgraph's prediction module on P local ranks."""

from __future__ import annotations

import argparse
import os
import shutil
import sys


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="dsgraph predict",
        description="Full-graph inference from a training checkpoint (any world size, any ZeRO stage) with the deepspeed "
        "launcher: writes logits [N, C], embeddings [N, d] and the split masks in dataset order. Other options go to "
        "the prediction script (see `python launch/predict.py --help`): --checkpoint-dir DIR, --tag T, --out FILE.npz, "
        "--strategy S, --bf16, --eval-only, --split K, --metric M, and for a link task --edges FILE (pairs to score).",
    )
    p.add_argument("--nprocs", type=int, default=1, help="ranks on this machine (GPUs when present, else CPU processes)")
    p.add_argument("--config", default="ds_configs/cpu_quickstart.json", help="the training run's DeepSpeed JSON")
    args, rest = p.parse_known_args(argv)
    launcher = shutil.which("deepspeed") or os.path.join(os.path.dirname(sys.executable), "deepspeed")
    cmd = [launcher, f"--num_accelerators={args.nprocs}", "--module", "dsgraph.train.predict", "--config", args.config, *rest]
    print("dsgraph: running", " ".join(cmd), flush=True)
    os.execv(cmd[0], cmd)
