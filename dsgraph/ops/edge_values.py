"""Edge-conditioned values: the attention-weighted sum of per-edge values, beside y.

For per-edge values u [E, C] in CSR order (the same for every head; constants, such as edge
features), ``sparse_attention(..., edge_values=u)`` also returns z [N_dst, H, C] with
z_i^h = sum_j a_ij^h u_ij, where a are the attention probabilities of y. TransformerConv's
edge-conditioned value, sum_j a_ij (v_j + u_ij W_e^h), is then y_i + z_i^h W_e^h exactly: the
projection is applied once per row instead of once per edge, and no E x H x D tensor exists.

Backward: z adds g_ij = <dz_i^h, u_ij> to every score's upstream gradient and <dz_i^h, z_i^h> to
delta_i^h, so ds_ij = p_ij (<dy_i, v_j> + g_ij - <dy_i, y_i> - <dz_i, z_i>). The reference backend
computes z with torch's autograd; a fused backend with ``supports_edge_values`` takes one of two paths:

- ``keeps_probabilities`` (the CPU kernels): its forward's p [E, H] are handed over
  (``probabilities``) and its backward takes g and the delta term (the keywords ``dp_extra`` [E, H]
  and ``delta_extra`` [N, H]): ``FusedEdgeValues``.
- only the log-sum-exp kept (the CUDA kernels): ``RecomputedEdgeValues`` runs the backend's own
  forward and backward unchanged and does the rest in torch. Forward recomputes
  p_ij = exp(scale <q_i, k_j> + b_ij - lse_i) for z. The split ds_ij = p_ij (<dy_i, v_j> - <dy_i, y_i>)
  + p_ij (g_ij - <dz_i, z_i>) is exact, so backward adds the second term's gradients, ds'_ij =
  p_ij (g_ij - <dz_i, z_i>): dq_i += scale sum_j ds'_ij k_j, dk_j += scale sum_i ds'_ij q_i and
  dbias_ij += ds'_ij (dv has none: z does not read v). Edges are taken in chunks of at most
  ``chunk_edges`` so that an E_chunk x H x D temporary stays under ``CHUNK_BYTES``; rows without
  edges (lse -inf) have no edge to recompute. Accumulation in lse's dtype (fp32 for fp32 and bf16).
  On CUDA, torch's ``index_add_`` sums in atomic order unless ``torch.use_deterministic_algorithms``
  is on (``edge_value_sum`` too).

On both paths the two row sums, z from p and g from dz, are the backend's ``value_sum`` and
``value_grad``: torch's ``edge_value_sum`` / ``edge_value_grad`` by default, numba passes over the
rows on the CPU backend (``ops/cpu/edge_value_kernels.py``).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from dsgraph.ops.csc import cached_per_graph

CHUNK_BYTES = 64 * 2**20
"""The recomputed path's memory budget: one E_chunk x H x D temporary (in the accumulation dtype) is
at most this many bytes; at most three are alive at once (the gathered q and k rows, one product)."""


def edge_rows(rowptr: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """int64 [E]: the destination row of every CSR edge (built once per graph and cached: every
    layer's forward and backward reads it)."""

    def rows() -> torch.Tensor:
        counts = rowptr[1:] - rowptr[:-1]
        return torch.repeat_interleave(
            torch.arange(rowptr.numel() - 1, device=rowptr.device), counts, output_size=col.numel()
        )

    return cached_per_graph(rowptr, col, ("edge-rows",), rows)


def edge_value_sum(rowptr: torch.Tensor, col: torch.Tensor, p_EH: torch.Tensor, u_EC: torch.Tensor) -> torch.Tensor:
    """z [N, H, C] = sum over each row's edges of p_EH[e, h] * u_EC[e, c] (one channel at a time, so
    the temporaries are E x H, never E x H x C); in p's dtype."""
    dst, n, heads = edge_rows(rowptr, col), rowptr.numel() - 1, p_EH.shape[1]
    z = p_EH.new_zeros((n, heads, u_EC.shape[1]))
    for c in range(u_EC.shape[1]):
        z[:, :, c] = p_EH.new_zeros((n, heads)).index_add_(0, dst, p_EH * u_EC[:, c, None])
    return z


def edge_value_grad(rowptr: torch.Tensor, col: torch.Tensor, dz_NHC: torch.Tensor, u_EC: torch.Tensor) -> torch.Tensor:
    """g [E, H] = <dz[dst(e), h], u[e]>: what z adds to the upstream gradient of every score."""
    dst = edge_rows(rowptr, col)
    g = dz_NHC.new_zeros((dst.numel(), dz_NHC.shape[1]))
    for c in range(u_EC.shape[1]):
        g += dz_NHC[:, :, c].index_select(0, dst) * u_EC[:, c, None]
    return g


class FusedEdgeValues(torch.autograd.Function):
    """(y, z) of a fused backend with ``supports_edge_values``; differentiable in q, k, v and the
    bias, not in the edge values."""

    @staticmethod
    def forward(ctx, backend, rowptr, col, q, k, v, scale, bias, u_EC):
        extra = {} if bias is None else {"bias": bias.detach()}
        y_acc, lse, saved = backend.forward(
            rowptr, col, q.detach(), k.detach(), v.detach(), scale, keep_probabilities=True, **extra
        )
        p_EH = backend.probabilities(saved)
        z = backend.value_sum(rowptr, col, p_EH, u_EC.to(p_EH.dtype))
        ctx.save_for_backward(q, k, v, y_acc, z, u_EC, *(() if bias is None else (bias,)), *saved)
        ctx.backend, ctx.graph, ctx.scale, ctx.has_bias = backend, (rowptr, col), scale, bias is not None
        return y_acc.to(q.dtype), z.to(q.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy, dz):
        q, k, v, y_acc, z, u_EC, *saved = (t.detach() for t in ctx.saved_tensors)
        bias = saved.pop(0) if ctx.has_bias else None
        dz = dz.to(z.dtype)
        extra = {"dp_extra": ctx.backend.value_grad(*ctx.graph, dz, u_EC.to(z.dtype)), "delta_extra": (dz * z).sum(-1)}
        needs = tuple(ctx.needs_input_grad[3:6]) + ((ctx.needs_input_grad[7],) if bias is not None else ())
        if bias is not None:
            extra["bias"] = bias
        with torch.profiler.record_function(f"dsgraph/attention/{ctx.backend.name}_backward"):
            grads = ctx.backend.backward(
                *ctx.graph, q, k, v, y_acc, tuple(saved), dy.detach(), ctx.scale, needs, **extra
            )
        dbias = grads[3] if bias is not None and ctx.needs_input_grad[7] else None
        return None, None, None, *(g if need else None for g, need in zip(grads[:3], needs[:3])), None, dbias, None


def chunk_edges(heads: int, dim: int, itemsize: int = 4) -> int:
    """Edges per chunk of the recomputed path: an E_chunk x H x D temporary within ``CHUNK_BYTES``."""
    return max(1, CHUNK_BYTES // (heads * dim * itemsize))


def edge_chunks(rowptr: torch.Tensor, col: torch.Tensor, size: int):
    """(first edge, dst, src) of consecutive chunks of at most ``size`` edges (dst, src int64)."""
    dst, src = edge_rows(rowptr, col), col.long()
    for begin in range(0, src.numel(), size):
        yield begin, dst[begin : begin + size], src[begin : begin + size]


def chunk_scores(q_acc, k_acc, dst, src, scale: float, bias_chunk, lse) -> tuple[torch.Tensor, ...]:
    """(p [E_c, H] = exp(scale <q_dst, k_src> + bias - lse_dst), the gathered q_dst and k_src
    [E_c, H, D]) of one chunk, in the accumulation dtype of q_acc, k_acc and lse."""
    q_e, k_e = q_acc.index_select(0, dst), k_acc.index_select(0, src)
    scores = torch.einsum("ehd,ehd->eh", q_e, k_e) * scale
    if bias_chunk is not None:
        scores = scores + bias_chunk.to(lse.dtype)
    return torch.exp(scores - lse.index_select(0, dst)), q_e, k_e


def recomputed_probabilities(rowptr, col, q, k, scale: float, bias, lse) -> torch.Tensor:
    """p [E, H] (CSR order, lse's dtype) from the forward's log-sum-exp, in chunks (``chunk_edges``)."""
    q_acc, k_acc = q.to(lse.dtype), k.to(lse.dtype)
    size = chunk_edges(q.shape[1], q.shape[2], lse.element_size())
    p_EH = lse.new_empty((col.numel(), q.shape[1]))
    for begin, dst, src in edge_chunks(rowptr, col, size):
        chunk_bias = None if bias is None else bias[begin : begin + dst.numel()]
        p_EH[begin : begin + dst.numel()] = chunk_scores(q_acc, k_acc, dst, src, scale, chunk_bias, lse)[0]
    return p_EH


def edge_value_score_grads(rowptr, col, q, k, scale: float, bias, lse, g_EH, delta_NH, needs):
    """The gradients of the edge values' score term ds'_ij = p_ij (g_ij - delta_i) (p recomputed from
    lse, in chunks): (dq = scale sum_j ds'_ij k_j, dk = scale sum_i ds'_ij q_i, dbias = ds' [E, H]),
    in lse's dtype; an entry whose ``needs`` flag (q, k, bias) is False is None."""
    acc = lse.dtype
    q_acc, k_acc = q.to(acc), k.to(acc)
    dq = torch.zeros_like(q_acc) if needs[0] else None
    dk = torch.zeros_like(k_acc) if needs[1] else None
    dbias = lse.new_empty((col.numel(), q.shape[1])) if needs[2] else None
    for begin, dst, src in edge_chunks(rowptr, col, chunk_edges(q.shape[1], q.shape[2], lse.element_size())):
        end = begin + dst.numel()
        p, q_e, k_e = chunk_scores(q_acc, k_acc, dst, src, scale, None if bias is None else bias[begin:end], lse)
        ds = p * (g_EH[begin:end] - delta_NH.index_select(0, dst))
        if dq is not None:
            dq.index_add_(0, dst, ds[:, :, None] * k_e)
        if dk is not None:
            dk.index_add_(0, src, ds[:, :, None] * q_e)
        if dbias is not None:
            dbias[begin:end] = ds
    return (None if dq is None else dq * scale), (None if dk is None else dk * scale), dbias


class RecomputedEdgeValues(torch.autograd.Function):
    """(y, z) of a fused backend that keeps only the log-sum-exp: its own forward and backward
    kernels, unchanged, and the edge values' terms in torch (the module docstring); differentiable
    in q, k, v and the bias, not in the edge values."""

    @staticmethod
    def forward(ctx, backend, rowptr, col, q, k, v, scale, bias, u_EC):
        q_, k_, bias_ = q.detach(), k.detach(), None if bias is None else bias.detach()
        extra = {} if bias is None else {"bias": bias_}
        y_acc, lse, saved = backend.forward(rowptr, col, q_, k_, v.detach(), scale, **extra)
        p_EH = recomputed_probabilities(rowptr, col, q_, k_, scale, bias_, lse)
        z = backend.value_sum(rowptr, col, p_EH, u_EC.to(lse.dtype))
        ctx.save_for_backward(q, k, v, y_acc, z, u_EC, lse, *(() if bias is None else (bias,)), *saved)
        ctx.backend, ctx.graph, ctx.scale, ctx.has_bias = backend, (rowptr, col), scale, bias is not None
        return y_acc.to(q.dtype), z.to(q.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy, dz):
        q, k, v, y_acc, z, u_EC, lse, *saved = (t.detach() for t in ctx.saved_tensors)
        bias = saved.pop(0) if ctx.has_bias else None
        needs = tuple(ctx.needs_input_grad[3:6]) + ((ctx.needs_input_grad[7],) if bias is not None else ())
        extra = {} if bias is None else {"bias": bias}
        with torch.profiler.record_function(f"dsgraph/attention/{ctx.backend.name}_backward"):
            grads = ctx.backend.backward(
                *ctx.graph, q, k, v, y_acc, tuple(saved), dy.detach(), ctx.scale, needs, **extra
            )
        dz = dz.to(z.dtype)
        g_EH, delta_NH = ctx.backend.value_grad(*ctx.graph, dz, u_EC.to(z.dtype)), (dz * z).sum(-1)
        need_extra = (needs[0], needs[1], bias is not None and needs[3])
        more = edge_value_score_grads(*ctx.graph, q, k, ctx.scale, bias, lse, g_EH, delta_NH, need_extra)
        dq, dk, dv = (
            _plus(g, m, t) if need else None for g, m, t, need in zip(grads[:3], (*more[:2], None), (q, k, v), needs)
        )
        dbias = _plus(grads[3], more[2], bias) if need_extra[2] else None
        return None, None, None, dq, dk, dv, None, dbias, None


def _plus(grad, more, like):
    """grad (the kernels', in like's dtype) + more (accumulation dtype, or None), in like's dtype."""
    return grad if more is None else (grad.to(more.dtype) + more).to(like.dtype)
