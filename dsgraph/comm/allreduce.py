"""Sums over all nodes of a graph split over ranks: the all-reduce of per-rank partial sums as an
autograd pair, and ``GlobalNodes``, the node set such a sum spans as one rank sees it.

Each rank sums a per-node quantity over its own rows; the all-reduce adds the partial sums of every
rank, so every rank holds the sum over all nodes. The loss is the sum of the ranks' losses, each of
which reads the total, so the gradient of a rank's partial sum is the sum over ranks of the
gradients of the total: backward is an all-reduce of the gradient. Linear global attention
(``dsgraph/models/global_attention.py``) sends its per-head sums through this, one small message
per layer forward and one backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dsgraph.comm.group import GraphParallelGroup
from dsgraph.comm.util import dist, nbytes


def all_reduce_bytes(payload_bytes: int, world_size: int) -> int:
    """Bytes one rank sends in an all-reduce of ``payload_bytes``, counted as a ring all-reduce does
    (a reduce-scatter and an all-gather of 1/P of the payload each, P - 1 steps): what ``CommStats``
    counts and what AGP declares."""
    return 2 * (world_size - 1) * payload_bytes // world_size if world_size > 1 else 0


def _all_reduce(x: torch.Tensor, pg: GraphParallelGroup) -> torch.Tensor:
    out = x.contiguous().clone()
    with pg.stats.record(out, all_reduce_bytes(nbytes(out), pg.world_size), "all_reduce"):
        dist().all_reduce(out, group=pg.group)
    return out


class _AllReduceSum(torch.autograd.Function):
    """Forward: the sum over ranks of ``x`` (same shape on every rank). Backward: the sum over ranks
    of the gradient (every rank's loss reads the total)."""

    @staticmethod
    def forward(ctx, x, pg):
        ctx.pg = pg
        return _all_reduce(x, pg)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, ctx.pg), None


def all_reduce_sum(x: torch.Tensor, pg: GraphParallelGroup) -> torch.Tensor:
    """The sum of ``x`` over the ranks of ``pg`` (any shape, the same on every rank), differentiable.
    One rank: ``x`` itself."""
    if pg.world_size == 1:
        return x
    return _AllReduceSum.apply(x, pg)


@dataclass(frozen=True)
class GlobalNodes:
    """The nodes a global sum spans, as this rank sees them: which of its rows take part (``rows``:
    None for all of them; a slice or an index/bool tensor over its rows) and the group whose ranks
    hold the others (the partial sums are all-reduced over ``pg``; a one-rank group: no collective).
    Every rank of ``pg`` must call ``sum`` the same number of times, in the same order."""

    pg: GraphParallelGroup
    rows: slice | torch.Tensor | None = None

    def select(self, x_n: torch.Tensor) -> torch.Tensor:
        """The rows of ``x_n`` [n, ...] that take part."""
        return x_n if self.rows is None else x_n[self.rows]

    def sum(self, partial: torch.Tensor) -> torch.Tensor:
        """This rank's partial sum -> the sum over the whole node set (on every rank)."""
        return all_reduce_sum(partial, self.pg)
