"""Building a Trainer inside a spawned rank, on a small graph saved as .npz."""

from __future__ import annotations

import json
import os

import torch

from dsgraph.graph import save_npz
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.trainer import Trainer
from tests.graphs import random_graph


def ds_config(stage: int = 2, bf16: bool = False, **extra) -> dict:
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        # torch.optim's AdamW (what the CLI picks on CPU): no FusedAdam JIT build, whose lock a killed test leaves behind
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": stage},
        "bf16": {"enabled": bf16},
        "steps_per_print": 10**6,
        **extra,
    }


def write_random_graph(tmp: str) -> str:
    path = os.path.join(tmp, "random.npz")
    if not os.path.exists(path):
        save_npz(random_graph(), path)
    return path


def make_trainer(tmp: str, ds: dict, **cfg) -> Trainer:
    settings = dict(dataset=write_random_graph(tmp), hidden=32, heads=4, layers=2, self_loops=False, seed=3)
    settings.update(cfg)
    return Trainer(DsgraphConfig.from_dict(settings), ds, torch.device("cpu"))


def dump(tmp: str, name: str, value) -> None:
    with open(os.path.join(tmp, name), "w") as f:
        json.dump(value, f)


def load(tmp, name: str):
    with open(os.path.join(tmp, name)) as f:
        return json.load(f)


def dump_losses(rank: int, tmp: str, name: str, runs: dict[str, dict], epochs: int) -> None:
    """Trains each run (``make_trainer`` settings, ZeRO-2) for ``epochs`` epochs; rank 0 saves the
    losses per run key in ``name``."""
    losses = {}
    for key, settings in runs.items():
        trainer = make_trainer(tmp, ds_config(stage=2), **settings)
        losses[key] = [trainer.train_epoch(epoch)["loss"] for epoch in range(epochs)]
    if rank == 0:
        dump(tmp, name, losses)
