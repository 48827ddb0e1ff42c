"""Sparse attention over blocks of sources, merged by their log-sum-exp (for ring strategies).

A strategy that sees the sources of a row one block at a time (``ag_ring``) runs the forward of each
block, ``merge``-s the partial results into the whole attention's (y, lse), and later runs each
block's backward given the whole attention's y and lse. The fused backends' backward reads what
their own forward saved (``Partial.saved``: the block's probabilities on CPU, its log-sum-exp on
CUDA), which are normalised over the block alone; with w_i = exp(lse_block_i - lse_i) the whole
attention's probabilities are w_i p_block_ij, so the block's backward on dy_i * w_i (and the whole
y, so that delta_i = <dy_i w_i, y_i>) gives exactly the block's share of dq and its dk and dv:
ds_ij = w_i p_block_ij (<dy_i, v_j> - <dy_i, y_i>) and dv_j = sum_i w_i p_block_ij dy_i.
A score bias [E_block, H] (the block's edges' slice of the whole bias, in the block's CSR order)
enters each block's scores; the block's backward returns its gradient, which is that ds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dsgraph.ops.backend import with_bias
from dsgraph.ops.dispatch import prepare_fused


@dataclass(frozen=True)
class Partial:
    """The forward of one block: y [N_dst, H, D] and lse [N_dst, H] in the accumulation dtype (rows
    without edges in the block: y = 0, lse = -inf) and what the backend's backward reads."""

    y: torch.Tensor
    lse: torch.Tensor
    saved: tuple[torch.Tensor, ...]


def attention_forward(rowptr, col, q, k, v, *, bias=None, scale: float | None = None, backend: str = "auto") -> Partial:
    """The forward pass over one block of sources, without autograd (k, v: the block's rows; bias:
    None or the block's edges' score bias [E_block, H])."""
    chosen, scale = prepare_fused(rowptr, col, q, k, v, scale, backend, bias)
    bias = None if bias is None else bias.detach()
    with torch.profiler.record_function(f"dsgraph/attention/{chosen.name}_forward"):
        y, lse, saved = chosen.forward(rowptr, col, q.detach(), k.detach(), v.detach(), scale, **with_bias(bias))
    return Partial(y, lse, saved)


def merge(a: Partial | tuple, b: Partial) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, lse) over the sources of both: ``a`` is a Partial or an earlier merge's (y, lse). Rows
    with no edges in either stay y = 0, lse = -inf."""
    y_a, lse_a = (a.y, a.lse) if isinstance(a, Partial) else a
    m = torch.maximum(lse_a, b.lse)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w_a, w_b = torch.exp(lse_a - m), torch.exp(b.lse - m)
    w = w_a + w_b
    y = (w_a[..., None] * y_a + w_b[..., None] * b.y) / w.clamp_min(torch.finfo(w.dtype).tiny)[..., None]
    return y, m + torch.log(w)


def attention_backward(rowptr, col, q, k, v, part: Partial, dy, *, bias=None, whole: tuple | None = None,
                       scale: float | None = None, backend: str = "auto", needs: tuple[bool, ...] = (True, True, True)):  # fmt: skip
    """(dq, dk, dv) of one block for the upstream gradient dy, without autograd; dq is the block's
    share of the rows' dq. ``whole``: the merged (y, lse) the block is part of (None: the block is
    the whole attention). With ``bias`` (the block's, as its forward had it) a fourth result: its
    gradient [E_block, H]."""
    chosen, scale = prepare_fused(rowptr, col, q, k, v, scale, backend, bias)
    bias = None if bias is None else bias.detach()
    needs = tuple(needs[:3]) + ((needs[3] if len(needs) > 3 else True,) if bias is not None else ())
    y = part.y
    if whole is not None:
        y, lse = whole
        weight = torch.where(torch.isfinite(part.lse), torch.exp(part.lse - lse), torch.zeros_like(lse))
        dy = dy.to(weight.dtype) * weight[..., None]
    with torch.profiler.record_function(f"dsgraph/attention/{chosen.name}_backward"):
        grads = chosen.backward(rowptr, col, q.detach(), k.detach(), v.detach(), y, part.saved, dy.detach(), scale, needs,
                                **with_bias(bias))  # fmt: skip
    return tuple(grads[:3]) if bias is None else tuple(grads[:4])
