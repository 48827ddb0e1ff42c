"""Edge-conditioned values: the attention-weighted sum of per-edge values, beside y.

For per-edge values u [E, C] in CSR order (the same for every head; constants, such as edge
features), ``sparse_attention(..., edge_values=u)`` also returns z [N_dst, H, C] with
z_i^h = sum_j a_ij^h u_ij, where a are the attention probabilities of y. TransformerConv's
edge-conditioned value, sum_j a_ij (v_j + u_ij W_e^h), is then y_i + z_i^h W_e^h exactly: the
projection is applied once per row instead of once per edge, and no E x H x D tensor exists.

Backward: z adds g_ij = <dz_i^h, u_ij> to every score's upstream gradient and <dz_i^h, z_i^h> to
delta_i^h, so ds_ij = p_ij (<dy_i, v_j> + g_ij - <dy_i, y_i> - <dz_i, z_i>). A fused backend with
``supports_edge_values`` hands over the probabilities of its forward (``probabilities``) and takes
g and the delta term in its backward (the keywords ``dp_extra`` [E, H] and ``delta_extra`` [N, H]);
the reference backend computes z with torch's autograd.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


def edge_rows(rowptr: torch.Tensor) -> torch.Tensor:
    """int64 [E]: the destination row of every CSR edge."""
    return torch.repeat_interleave(torch.arange(rowptr.numel() - 1, device=rowptr.device), rowptr[1:] - rowptr[:-1])


def edge_value_sum(rowptr: torch.Tensor, p_EH: torch.Tensor, u_EC: torch.Tensor) -> torch.Tensor:
    """z [N, H, C] = sum over each row's edges of p_EH[e, h] * u_EC[e, c] (one channel at a time, so
    the temporaries are E x H, never E x H x C); in p's dtype."""
    dst, n, heads = edge_rows(rowptr), rowptr.numel() - 1, p_EH.shape[1]
    z = p_EH.new_zeros((n, heads, u_EC.shape[1]))
    for c in range(u_EC.shape[1]):
        z[:, :, c] = p_EH.new_zeros((n, heads)).index_add_(0, dst, p_EH * u_EC[:, c, None])
    return z


def edge_value_grad(rowptr: torch.Tensor, dz_NHC: torch.Tensor, u_EC: torch.Tensor) -> torch.Tensor:
    """g [E, H] = <dz[dst(e), h], u[e]>: what z adds to the upstream gradient of every score."""
    dst = edge_rows(rowptr)
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
        y_acc, lse, saved = backend.forward(rowptr, col, q.detach(), k.detach(), v.detach(), scale, **extra)
        p_EH = backend.probabilities(saved)
        z = edge_value_sum(rowptr, p_EH, u_EC.to(p_EH.dtype))
        ctx.save_for_backward(q, k, v, y_acc, z, u_EC, *(() if bias is None else (bias,)), *saved)
        ctx.backend, ctx.graph, ctx.scale, ctx.has_bias = backend, (rowptr, col), scale, bias is not None
        return y_acc.to(q.dtype), z.to(q.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy, dz):
        q, k, v, y_acc, z, u_EC, *saved = (t.detach() for t in ctx.saved_tensors)
        bias = saved.pop(0) if ctx.has_bias else None
        dz = dz.to(z.dtype)
        extra = {"dp_extra": edge_value_grad(ctx.graph[0], dz, u_EC.to(z.dtype)), "delta_extra": (dz * z).sum(-1)}
        needs = tuple(ctx.needs_input_grad[3:6]) + ((ctx.needs_input_grad[7],) if bias is not None else ())
        if bias is not None:
            extra["bias"] = bias
        with torch.profiler.record_function(f"dsgraph/attention/{ctx.backend.name}_backward"):
            grads = ctx.backend.backward(*ctx.graph, q, k, v, y_acc, tuple(saved), dy.detach(), ctx.scale, needs, **extra)
        dbias = grads[3] if bias is not None and ctx.needs_input_grad[7] else None
        return None, None, None, *(g if need else None for g, need in zip(grads[:3], needs[:3])), None, dbias, None
