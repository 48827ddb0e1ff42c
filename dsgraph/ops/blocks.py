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

Edge values u [E_block, C] (``edge_values.py``; backends with ``supports_edge_values``): each
block's forward also gives z_block = sum_j p_block_ij u_ij (p from the kernels where the backend
``keeps_probabilities``, else recomputed from the block's lse), merged like y. The block's share of
the whole attention's ds_ij = a_ij (<dy_i, v_j> + <dz_i, u_ij> - <dy_i, y_i> - <dz_i, z_i>) then
comes, on the kernels' path, from dz_i w_i in place of dz_i (they add g_ij = w_i <dz_i, u_ij> to each
score's upstream gradient and w_i <dz_i, z_i>, the whole z, to delta); on the recomputed path, from
the kernels' unchanged backward plus the gradients of a_ij (<dz_i, u_ij> - <dz_i, z_i>), with
a_ij = exp(s_ij - lse_i) recomputed from the whole lse.

Constant scores (q = k = None, ``mean.py``): a block's forward is the mean over its own edges with
lse = log of their count, so ``merge`` gives the mean over all of them, and the block's backward
on dy_i w_i is its share of dv (there is no dq or dk); no bias or edge values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dsgraph.ops.backend import FusedBackend, with_bias
from dsgraph.ops.dispatch import prepare_constant_scores, prepare_fused
from dsgraph.ops.edge_values import edge_value_score_grads, recomputed_probabilities


@dataclass(frozen=True)
class Partial:
    """The forward of one block: y [N_dst, H, D] and lse [N_dst, H] in the accumulation dtype (rows
    without edges in the block: y = 0, lse = -inf) and what the backend's backward reads; with edge
    values, z [N_dst, H, C] (accumulation dtype; 0 for rows without edges in the block)."""

    y: torch.Tensor
    lse: torch.Tensor
    saved: tuple[torch.Tensor, ...]
    z: torch.Tensor | None = None


def _fused_for(rowptr, col, q, k, v, scale, backend, bias, edge_values):
    """``prepare_fused``, and a ValueError when edge values go to a backend without them."""
    chosen, scale = prepare_fused(rowptr, col, q, k, v, scale, backend, bias)
    if edge_values is not None and not chosen.supports_edge_values:
        raise ValueError(
            f"sparse attention blocks: backend '{chosen.name}' takes no edge values (supports_edge_values); "
            "model.edge_features 'bias' needs none"
        )
    if edge_values is not None and (edge_values.dim() != 2 or edge_values.shape[0] != col.shape[0]):
        raise ValueError(
            f"sparse attention blocks: edge_values must be [E_block, C] with E_block = {col.shape[0]}, "
            f"got {tuple(edge_values.shape)}"
        )
    return chosen, scale


def attention_forward(
    rowptr, col, q, k, v, *, bias=None, edge_values=None, scale: float | None = None, backend: str = "auto"
) -> Partial:
    """The forward pass over one block of sources, without autograd (k, v: the block's rows; bias:
    None or the block's edges' score bias [E_block, H]; edge_values: None or the block's edges' u
    [E_block, C], then the Partial has z)."""
    if q is None:
        mean = _mean_for(rowptr, col, k, v, backend, bias, edge_values)
        with torch.profiler.record_function(f"dsgraph/attention/{mean.name}_mean_forward"):
            return Partial(*mean.mean_forward(rowptr, col, v.detach()), ())
    chosen, scale = _fused_for(rowptr, col, q, k, v, scale, backend, bias, edge_values)
    bias = None if bias is None else bias.detach()
    with torch.profiler.record_function(f"dsgraph/attention/{chosen.name}_forward"):
        keep = {"keep_probabilities": True} if edge_values is not None and chosen.keeps_probabilities else {}
        y, lse, saved = chosen.forward(
            rowptr, col, q.detach(), k.detach(), v.detach(), scale, **with_bias(bias), **keep
        )
    if edge_values is None:
        return Partial(y, lse, saved)
    if chosen.keeps_probabilities:
        p_EH = chosen.probabilities(saved)
    else:
        p_EH = recomputed_probabilities(rowptr, col, q.detach(), k.detach(), scale, bias, lse)
    return Partial(y, lse, saved, chosen.value_sum(rowptr, col, p_EH, edge_values.detach().to(p_EH.dtype)))


def _block_weight(part: Partial, lse: torch.Tensor) -> torch.Tensor:
    """[N_dst, H, 1] w_i = exp(lse_block_i - lse_i), the block's share of the whole softmax (0 for
    rows without edges in the block)."""
    return torch.where(torch.isfinite(part.lse), torch.exp(part.lse - lse), torch.zeros_like(lse))[..., None]


def _mean_for(rowptr, col, k, v, backend, bias, edge_values) -> FusedBackend:
    """The fused backend for a block with constant scores; ValueErrors for what they do not take."""
    if k is not None or bias is not None or edge_values is not None:
        raise ValueError("sparse attention blocks: constant scores (q = None) take k = None, no bias or edge values")
    chosen = prepare_constant_scores(rowptr, col, v, backend)
    if not isinstance(chosen, FusedBackend):
        raise ValueError(f"sparse attention backend '{chosen.name}' has no separate forward and backward passes")
    return chosen


def _mean_backward(rowptr, col, k, v, part: Partial, dy, whole, backend, bias, edge_values):
    """``attention_backward`` with constant scores: (None, None, dv) of the block."""
    mean = _mean_for(rowptr, col, k, v, backend, bias, edge_values)
    if whole is not None:  # w_i = d_block_i / d_i
        weight = _block_weight(part, whole[1])
        dy = dy.to(weight.dtype) * weight
    with torch.profiler.record_function(f"dsgraph/attention/{mean.name}_mean_backward"):
        dv = mean.mean_backward(rowptr, col, dy.detach(), v.shape[0])
    return None, None, dv.to(v.dtype)


def merge(a: Partial | tuple, b: Partial) -> tuple[torch.Tensor, ...]:
    """(y, lse) over the sources of both, and z when the blocks have edge values: ``a`` is a Partial
    or an earlier merge's (y, lse[, z]). Rows with no edges in either stay y = 0 (z = 0), lse = -inf."""
    y_a, lse_a, z_a = (a.y, a.lse, a.z) if isinstance(a, Partial) else (*a[:2], a[2] if len(a) > 2 else None)
    m = torch.maximum(lse_a, b.lse)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w_a, w_b = torch.exp(lse_a - m), torch.exp(b.lse - m)
    w = w_a + w_b
    denom = w.clamp_min(torch.finfo(w.dtype).tiny)[..., None]
    y = (w_a[..., None] * y_a + w_b[..., None] * b.y) / denom
    if b.z is None:
        return y, m + torch.log(w)
    return y, m + torch.log(w), (w_a[..., None] * z_a + w_b[..., None] * b.z) / denom


def attention_backward(
    rowptr,
    col,
    q,
    k,
    v,
    part: Partial,
    dy,
    *,
    bias=None,
    edge_values=None,
    dz=None,
    whole: tuple | None = None,
    scale: float | None = None,
    backend: str = "auto",
    needs: tuple[bool, ...] = (True, True, True),
):
    """(dq, dk, dv) of one block for the upstream gradient dy, without autograd; dq is the block's
    share of the rows' dq. ``whole``: the merged (y, lse[, z]) the block is part of (None: the block
    is the whole attention). With ``bias`` (the block's, as its forward had it) a fourth result: its
    gradient [E_block, H]. With ``edge_values`` (the block's u, as its forward had them) and ``dz``
    [N_dst, H, C], the upstream gradient of the whole z: their terms enter the scores' gradient.
    Constant scores (q = k = None): (None, None, dv)."""
    if q is None:
        return _mean_backward(rowptr, col, k, v, part, dy, whole, backend, bias, edge_values)
    chosen, scale = _fused_for(rowptr, col, q, k, v, scale, backend, bias, edge_values)
    bias = None if bias is None else bias.detach()
    needs = tuple(needs[:3]) + ((needs[3] if len(needs) > 3 else True,) if bias is not None else ())
    y, lse, z = part.y, part.lse, part.z
    weight = None
    if whole is not None:
        y, lse, z = (*whole[:2], whole[2] if len(whole) > 2 else None)
        weight = _block_weight(part, lse)
        dy = dy.to(weight.dtype) * weight
    fused = edge_values is not None and chosen.keeps_probabilities
    extra = with_bias(bias)
    if edge_values is not None:
        dz = torch.zeros_like(z) if dz is None else dz.to(z.dtype)
        u = edge_values.detach().to(z.dtype)
        if fused and weight is not None:
            dz = dz * weight  # the kernels' p is the block's: w_i p_block_ij = a_ij
        g_EH, delta_NH = chosen.value_grad(rowptr, col, dz, u), (dz * z).sum(-1)
        if fused:
            extra.update(dp_extra=g_EH, delta_extra=delta_NH)
    with torch.profiler.record_function(f"dsgraph/attention/{chosen.name}_backward"):
        grads = chosen.backward(
            rowptr, col, q.detach(), k.detach(), v.detach(), y, part.saved, dy.detach(), scale, needs, **extra
        )
    grads = list(grads[:3]) if bias is None else list(grads[:4])
    if edge_values is not None and not fused:  # the edge values' score term, p recomputed from the whole lse
        _add_edge_value_score_grads(grads, rowptr, col, q, k, scale, bias, lse, g_EH, delta_NH, needs)
    return tuple(grads)


def _add_edge_value_score_grads(grads: list, rowptr, col, q, k, scale, bias, lse, g_EH, delta_NH, needs) -> None:
    """Adds the edge values' term of the scores' gradient to ``grads`` (dq, dk[, dbias]) in place, for a
    backend whose backward does not take it."""
    more = edge_value_score_grads(
        rowptr,
        col,
        q.detach(),
        k.detach(),
        scale,
        bias,
        lse,
        g_EH,
        delta_NH,
        (needs[0], needs[1], bias is not None and needs[3]),
    )
    for i, extra_grad in zip((0, 1, 3), more):
        if extra_grad is not None and grads[i] is not None:  # in the kernels' dtype, summed in lse's
            grads[i] = (grads[i].to(extra_grad.dtype) + extra_grad).to(grads[i].dtype)
