"""Activation checkpointing of the model's blocks: a checkpointed block keeps only its input for
backward and runs its forward again there (``torch.utils.checkpoint``, non-reentrant). A Transformer
block is checkpointed per sublayer (attention, FFN), so the recompute holds one sublayer's
activations at a time and the block keeps its input and the attention sublayer's output.

The recompute is exact: dropout masks are hashes of (seed, step, layer, site, node id), not draws
from an RNG stream, and a strategy's collectives run again in the same order on every rank (every
rank recomputes the same blocks in the same backward order). What it costs: one more forward of
each checkpointed block (about a third of its forward-plus-backward time), and the bytes of the
strategy's forward collectives again (GP-AG gathers K and V twice per layer).

The model is not changed: each checkpointed block's ``forward`` (or sublayers) is wrapped on the instance, so
parameter names, ``state_dict`` and checkpoints stay as they are.
"""

from __future__ import annotations

import functools

import torch
from torch.utils.checkpoint import checkpoint


def checkpoint_blocks(model: torch.nn.Module, every: int = 1) -> list[int]:
    """Checkpoints blocks 0, every, 2*every, ... of ``model.blocks``; returns their indices. A block
    that names ``sublayers`` (methods its forward calls in turn) has each of them checkpointed
    instead: backward then recomputes and holds one sublayer at a time, at no extra compute."""
    if every < 1:
        raise ValueError(f"checkpoint_every_layers must be >= 1, got {every}")
    chosen = list(range(0, len(model.blocks), every))
    for index in chosen:
        block = model.blocks[index]
        for name in getattr(block, "sublayers", ("forward",)):
            setattr(block, name, functools.partial(_recomputed, getattr(block, name)))
    return chosen


def _recomputed(forward, *args, **kwargs):
    if not torch.is_grad_enabled():  # evaluation: nothing is kept for backward anyway
        return forward(*args, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)
