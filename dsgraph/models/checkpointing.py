"""Activation checkpointing of the model's blocks: a checkpointed block keeps only its input for
backward and runs its forward again there (``torch.utils.checkpoint``, non-reentrant). A Transformer
block is checkpointed per sublayer (attention, FFN), so the recompute holds one sublayer's
activations at a time and the block keeps its input and the attention sublayer's output.

``nested``: a block with sublayers is also checkpointed whole around its checkpointed sublayers, so
it keeps only its input; its backward first recomputes the attention sublayer to get the FFN's input
(the outer recompute stops there), then each sublayer again as above. One row per block instead of
two, for one more forward of the attention sublayer and of its collectives.

The recompute is exact: dropout masks are hashes of (seed, step, layer, site, node id), not draws
from an RNG stream, and a strategy's collectives run again in the same order on every rank (every
rank recomputes the same blocks in the same backward order, each in full). What it costs: one more forward of
each checkpointed block (about a third of its forward-plus-backward time), and the bytes of the
strategy's forward collectives again (GP-AG gathers K and V twice per layer; three times nested).

Selective recomputation (``recompute_selectively``, on by default in training) is the cheap half of
the same idea: a block not checkpointed whole keeps what its sparse attention keeps, its input and
the attention's output, and recomputes only the regions before and after the attention (norms,
projections, global branch, FFN, dropout), which are cheap to run again and large to keep; the
attention and its collectives run once.

The model is not changed: each checkpointed block's ``forward`` (or sublayers) is wrapped on the instance, so
parameter names, ``state_dict`` and checkpoints stay as they are.
"""

from __future__ import annotations

import functools

import torch
from torch.utils.checkpoint import checkpoint


def checkpoint_blocks(model: torch.nn.Module, every: int = 1, nested: bool = False) -> list[int]:
    """Checkpoints blocks 0, every, 2*every, ... of ``model.blocks``; returns their indices. A block
    that names ``sublayers`` (methods its forward calls in turn) has each of them checkpointed
    instead: backward then recomputes and holds one sublayer at a time, at no extra compute; with
    ``nested`` its forward is checkpointed around them too."""
    if every < 1:
        raise ValueError(f"checkpoint_every_layers must be >= 1, got {every}")
    chosen = list(range(0, len(model.blocks), every))
    for index in chosen:
        block = model.blocks[index]
        sublayers = getattr(block, "sublayers", ())
        for name in sublayers or ("forward",):
            setattr(block, name, functools.partial(_recomputed, getattr(block, name)))
        if nested and sublayers:
            # The last sublayer (the FFN) runs no collective, so the outer recompute may stop as soon
            # as it has the sublayers' inputs back.
            block.forward = functools.partial(_recomputed, block.forward, early_stop=True)
    return chosen


def recompute_selectively(model: torch.nn.Module) -> list[int]:
    """Selective recomputation in every block that offers it (``recompute`` attribute) and is not
    checkpointed whole: the block keeps what its attention keeps (q, k, v and the kernels' own
    tensors), its input and the attention's output, and recomputes the norms, projections, global
    branch, FFN and dropout in backward (the "selective" recomputation of Korthikanti et al., 2022:
    what is cheap to compute and large to keep). Returns the blocks' indices."""
    chosen = []
    for index, block in enumerate(model.blocks):
        checkpointed = any(name in vars(block) for name in ("forward", *getattr(block, "sublayers", ())))
        if hasattr(block, "recompute") and not checkpointed:
            block.recompute = True
            chosen.append(index)
    return chosen


def recomputed(enabled: bool, forward, *args):
    """``forward(*args)``, checkpointed when ``enabled`` and gradients are on."""
    return _recomputed(forward, *args) if enabled else forward(*args)


def _recomputed(forward, *args, early_stop: bool = False, **kwargs):
    if not torch.is_grad_enabled():  # evaluation: nothing is kept for backward anyway
        return forward(*args, **kwargs)
    # early_stop=False (the default here): the recompute runs the whole forward. torch would otherwise
    # stop once the saved tensors backward needs exist, and skip a block's trailing collective when
    # what follows it saves nothing (GP-A2A's heads-to-nodes exchange in the output attention layer,
    # whose slice and head mean keep no tensors), so the bytes would no longer be what AGP declares.
    return checkpoint(forward, *args, use_reentrant=False, early_stop=early_stop, **kwargs)
