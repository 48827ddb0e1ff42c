"""Activation checkpointing of the model's blocks: a checkpointed block keeps only the inputs of its
two halves for backward (the block's input, and the residual between its attention and its FFN)
and runs each half's forward again there, one half at a time (``torch.utils.checkpoint``,
non-reentrant). Recomputing halves rather than whole blocks costs the same compute and halves what
exists at once during backward: about 5.5 rows of d floats per node for the larger half instead
of about 12.5 for a block, for one more kept row per block.

The recompute is exact: dropout masks are hashes of (seed, step, layer, site, node id), not draws
from an RNG stream, and a strategy's collectives run again in the same order on every rank (every
rank recomputes the same blocks in the same backward order). What it costs: one more forward of
each checkpointed block (about a third of its forward-plus-backward time), and the bytes of the
strategy's forward collectives again (GP-AG gathers K and V twice per layer).

The model is not changed: each checkpointed block's two halves are wrapped on the instance, so
parameter names, ``state_dict`` and checkpoints stay as they are.
"""

from __future__ import annotations

import functools

import torch
from torch.utils.checkpoint import checkpoint


def checkpoint_blocks(model: torch.nn.Module, every: int = 1) -> list[int]:
    """Checkpoints blocks 0, every, 2*every, ... of ``model.blocks``; returns their indices."""
    if every < 1:
        raise ValueError(f"checkpoint_every_layers must be >= 1, got {every}")
    chosen = list(range(0, len(model.blocks), every))
    for index in chosen:
        block = model.blocks[index]
        block.attention_half = functools.partial(_recomputed, block.attention_half)
        block.ffn_half = functools.partial(_recomputed, block.ffn_half)
    return chosen


def _recomputed(forward, *args, **kwargs):
    if not torch.is_grad_enabled():  # evaluation: nothing is kept for backward anyway
        return forward(*args, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)
