"""Checkpoints through DeepSpeed (every rank takes part), with dsgraph's loop state in client state."""

from __future__ import annotations

import os

import torch


def save(engine, directory: str, epoch: int, seed: int, best: dict) -> None:
    client_state = {"epoch": epoch, "seed": seed, "best": best, "torch_rng_state": torch.get_rng_state()}
    engine.save_checkpoint(directory, tag=f"epoch{epoch:06d}", client_state=client_state)


def load_latest(engine, directory: str, seed: int) -> dict:
    """Loads the latest checkpoint in ``directory``; returns its client state.
    Raises FileNotFoundError if there is none, ValueError if it was made with another seed."""
    if not os.path.isfile(os.path.join(directory, "latest")):
        raise FileNotFoundError(f"{directory}: no checkpoint to resume from (no 'latest' file)")
    path, client_state = engine.load_checkpoint(directory)
    if path is None or client_state is None:
        raise FileNotFoundError(f"{directory}: the latest checkpoint could not be loaded")
    if client_state.get("seed") != seed:
        raise ValueError(f"{path}: checkpoint was made with seed {client_state.get('seed')}, this run uses {seed}")
    torch.set_rng_state(client_state["torch_rng_state"])
    return client_state
