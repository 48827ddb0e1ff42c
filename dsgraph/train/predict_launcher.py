"""``dsgraph predict``: starts ``deepspeed`` with dsgraph's prediction module on P local ranks."""

from __future__ import annotations

import argparse

from dsgraph.train.launcher import add_port_argument, checked_port, run_deepspeed


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="dsgraph predict",
        description="Full-graph inference from a training checkpoint (any world size, any ZeRO stage) with the "
        "deepspeed launcher: writes logits [N, C] (a regression task: predictions), embeddings [N, d] and the split "
        "masks in dataset order. Other options go to the prediction script (see `python launch/predict.py --help`): "
        "--checkpoint-dir DIR, --tag T, --out FILE.npz, --strategy S, --bf16, --eval-only, --split K, --metric M, and "
        "for a link task --edges FILE (pairs to score).",
    )
    p.add_argument(
        "--nprocs", type=int, default=1, help="ranks on this machine (GPUs when present, else CPU processes)"
    )
    p.add_argument("--config", default="ds_configs/cpu_quickstart.json", help="the training run's DeepSpeed JSON")
    add_port_argument(p)
    args, rest = p.parse_known_args(argv)
    run_deepspeed(
        "dsgraph.train.predict", args.nprocs, ["--config", args.config, *rest], checked_port(p, args.master_port)
    )
