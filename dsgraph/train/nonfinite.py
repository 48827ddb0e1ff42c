"""Numerical faults: a non-finite training loss or gradient, found on every rank in the same step.

Each rank checks its own loss, whether DeepSpeed skipped the optimizer step for a non-finite
gradient norm (ZeRO does; not counted under fp16, whose loss scaling skips steps by design), and its
parameters after the step (one sum over them; names are looked up only when it is not finite).
The ranks agree through the step's own all-reduce (a flag per rank beside the loss sums, no extra
collective); a mode whose steps do not reduce agrees once at the epoch's end. ``nonfinite`` then
decides: 'stop' raises ``NonFiniteError`` on every rank (exit code 2) naming the epoch, the ranks
and what each found (the loss, the gradient, the first non-finite parameter); 'rollback' reloads
the newest checkpoint, multiplies the learning rate by ``nonfinite_lr_factor``
(``LearningRateScale``) and skips the step that failed."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

ACTIONS = ("stop", "rollback")


class NonFiniteError(ValueError):
    """A non-finite loss or parameter with ``nonfinite`` 'stop', or no checkpoint to roll back to."""


def local_finding(loss: float, module: torch.nn.Module, skipped: bool = False) -> str | None:
    """What is non-finite on this rank after a step: its loss, the gradient (``skipped``: DeepSpeed
    skipped the step because the gradient norm was not finite) and the first non-finite parameter
    (by name); None if nothing is."""
    found = [] if math.isfinite(loss) else [f"loss {loss}"]
    if skipped:
        found.append("gradient norm not finite (DeepSpeed skipped the optimizer step)")
    tensors = [getattr(p, "ds_tensor", p).detach() for p in module.parameters()]  # ZeRO-3: this rank's partition
    if tensors and not math.isfinite(float(torch.stack([t.float().sum() for t in tensors]).sum())):
        name = next(
            (n for n, p in module.named_parameters() if not torch.isfinite(getattr(p, "ds_tensor", p)).all()), None
        )
        found.append(f"first non-finite parameter '{name}'" if name else "the sum of the parameters overflows")
    return "; ".join(found) or None


@dataclass
class Fault:
    """A step in which some rank found a non-finite value."""

    epoch: int
    index: int
    """The step's index within its epoch (0 for full-graph training)."""
    step: int
    ranks: list[int]
    finding: str | None
    """This rank's own finding (None: another rank's)."""

    def message(self, rank: int) -> str:
        mine = f"rank {rank}: {self.finding}" if self.finding else f"rank {rank} saw only finite values"
        return (
            f"non-finite training values at epoch {self.epoch} (step {self.step}) on rank(s) "
            f"{', '.join(map(str, self.ranks))}; {mine}"
        )

    def event(self, action: str, lr_scale: float) -> dict:
        """The metrics row that records it."""
        return {
            "kind": "event",
            "event": "nonfinite",
            "action": action,
            "epoch": self.epoch,
            "step": self.step,
            "ranks": self.ranks,
            "lr_scale": lr_scale,
        }


def flags(finding: str | None, rank: int, world: int) -> list[float]:
    """This rank's slot of the per-rank flags that the ranks sum."""
    out = [0.0] * world
    out[rank] = 1.0 if finding else 0.0
    return out


def flagged(summed: list[float]) -> list[int]:
    return [r for r, v in enumerate(summed) if v > 0 or not math.isfinite(v)]


class LearningRateScale:
    """Multiplies the learning rate of every optimizer step by ``factor`` without changing what the
    optimizer (or DeepSpeed's scheduler, which sets the rate anew each step) stores, so checkpoints
    keep the configured rate and record the factor beside it."""

    def __init__(self, engine, factor: float = 1.0):
        self.engine, self.factor, self._before = engine, factor, None

    def before_step(self) -> None:
        if self.factor == 1.0:
            return
        groups = self.engine.optimizer.param_groups
        self._before = [g["lr"] for g in groups]
        for g in groups:
            g["lr"] *= self.factor

    def after_step(self) -> None:
        if self._before is None:
            return
        for g, lr in zip(self.engine.optimizer.param_groups, self._before):
            if g["lr"] == lr * self.factor:  # no scheduler set a new rate
                g["lr"] = lr
        self._before = None
