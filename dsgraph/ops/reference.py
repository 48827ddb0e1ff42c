"""The pure-torch sparse attention: the oracle every fused backend is tested against.

It is also the "unfused" baseline: it gathers q_i and k_j for every edge and materialises E x H
scores and E x H x D messages, which is what runs large graphs out of memory.
"""

from __future__ import annotations

import torch

from dsgraph.ops.backend import FusedBackend
from dsgraph.ops.edge_values import edge_rows
from dsgraph.ops.mean import mean_lse


def sparse_attention_reference(
    rowptr: torch.Tensor,
    col: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None = None,
    edge_values: torch.Tensor | None = None,
):
    """y[i] = sum_{j in col[rowptr[i]:rowptr[i+1]]} softmax_j(scale * <q_i, k_j> + bias_ij) v_j, per head.

    q: [N_dst, H, D]; k, v: [N_src, H, D]; bias: None or [E, H], one score bias per edge and head in
    CSR order; returns y [N_dst, H, D] in q's dtype (fp32 math for bf16 inputs). Rows with no edges
    give zeros. Differentiable in q, k, v and bias (d bias_ij = ds_ij, the score's gradient). With
    ``edge_values`` u [E, C] (CSR order, constants) returns (y, z), z [N_dst, H, C] = sum_j a_ij u_ij.
    q = k = None: every score is 0 (constant scores, ``mean.py``): y_i is the mean of the row's v_j,
    in v's dtype, computed by this same softmax.
    """
    n_dst, heads = rowptr.numel() - 1, v.shape[1]
    like = v if q is None else q  # dtype and device of the result
    dst, src, acc = _edges(rowptr, col, like)
    scores_EH = _scores(q, k, dst, src, scale, bias, acc, heads)
    row_max_NH = torch.full((n_dst, heads), float("-inf"), dtype=acc, device=v.device)
    row_max_NH = row_max_NH.scatter_reduce(0, dst[:, None].expand_as(scores_EH), scores_EH.detach(), "amax")
    weights_EH = torch.exp(scores_EH - row_max_NH[dst])
    denom_NH = torch.zeros((n_dst, heads), dtype=acc, device=v.device).index_add(0, dst, weights_EH)
    probs_EH = weights_EH / denom_NH[dst]
    y = torch.zeros((n_dst, *v.shape[1:]), dtype=acc, device=v.device)
    y = y.index_add(0, dst, probs_EH[:, :, None] * v.to(acc)[src])  # cast first: dv sums in acc, not bf16
    if edge_values is None:
        return y.to(like.dtype)
    z = torch.zeros((n_dst, heads, edge_values.shape[1]), dtype=acc, device=v.device)
    z = z.index_add(0, dst, probs_EH[:, :, None] * edge_values.to(acc)[:, None, :])
    return y.to(like.dtype), z.to(like.dtype)


def _edges(rowptr, col, q):
    """dst, src (int64 [E]) and the accumulation dtype of the inputs."""
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    return edge_rows(rowptr, col), col.long(), acc


def _scores(q, k, dst, src, scale: float, bias, acc, heads: int = 0) -> torch.Tensor:
    """s [E, H] = scale * <q_dst, k_src> (+ bias) in the accumulation dtype; 0 [E, heads] for q = None."""
    if q is None:
        return torch.zeros((dst.numel(), heads), dtype=acc, device=dst.device)
    scores_EH = (q.to(acc)[dst] * k.to(acc)[src]).sum(-1) * scale
    return scores_EH if bias is None else scores_EH + bias.to(acc)


def reference_forward(rowptr, col, q, k, v, scale: float, bias=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward pass as the fused kernels compute it, in torch: (y [N_dst, H, D], lse [N_dst, H]),
    both in the accumulation dtype; lse is -inf and y 0 for rows without edges. No autograd.
    q = k = None: constant scores (every score 0)."""
    dst, src, acc = _edges(rowptr, col, v)
    n_dst, heads = rowptr.numel() - 1, v.shape[1]
    scores_EH = _scores(q, k, dst, src, scale, bias, acc, heads)
    max_NH = torch.full((n_dst, heads), float("-inf"), dtype=acc, device=v.device)
    max_NH = max_NH.scatter_reduce(0, dst[:, None].expand_as(scores_EH), scores_EH, "amax")
    weights_EH = torch.exp(scores_EH - max_NH[dst])
    denom_NH = torch.zeros((n_dst, heads), dtype=acc, device=v.device).index_add(0, dst, weights_EH)
    y = torch.zeros((n_dst, *v.shape[1:]), dtype=acc, device=v.device)
    y = y.index_add(0, dst, weights_EH[:, :, None] * v[src].to(acc))
    y = y / denom_NH.clamp_min(torch.finfo(acc).tiny)[:, :, None]
    return y, max_NH + torch.log(denom_NH)


def reference_backward(rowptr, col, q, k, v, y, lse, dy, scale: float, bias=None):
    """The backward pass as the fused kernels compute it, given the forward's y and lse (both in the
    accumulation dtype; for a block of a larger attention, the whole attention's): p = exp(s - lse),
    ds = p (<dy, v> - <dy, y>); returns (dq, dk, dv, dbias) in the inputs' dtype, dbias = ds [E, H]
    (None without a bias). No autograd."""
    dst, src, acc = _edges(rowptr, col, q)
    q_, k_, v_, dy_ = (t.to(acc) for t in (q, k, v, dy))
    p_EH = torch.exp(_scores(q_, k_, dst, src, scale, bias, acc) - lse[dst])
    delta_NH = (dy_ * y.to(acc)).sum(-1)
    ds_EH = p_EH * ((dy_[dst] * v_[src]).sum(-1) - delta_NH[dst])
    dq = torch.zeros_like(q_).index_add(0, dst, ds_EH[:, :, None] * k_[src]) * scale
    dk = torch.zeros_like(k_).index_add(0, src, ds_EH[:, :, None] * q_[dst]) * scale
    dv = torch.zeros_like(v_).index_add(0, src, p_EH[:, :, None] * dy_[dst])
    dbias = None if bias is None else ds_EH.to(bias.dtype)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dbias


def reference_mean_backward(rowptr, col, dy, n_src: int) -> torch.Tensor:
    """Constant scores' backward as ``reference_backward`` computes it with every score 0 (p_ij =
    exp(0 - lse_i) = 1/d_i): dv [N_src, H, D] in the accumulation dtype. No autograd."""
    dst, src, acc = _edges(rowptr, col, dy)
    p_EH = torch.exp(-mean_lse(rowptr, dy.shape[1], acc)[dst])
    return torch.zeros((n_src, *dy.shape[1:]), dtype=acc, device=dy.device).index_add(
        0, src, p_EH[:, :, None] * dy.to(acc)[dst]
    )


class ReferenceBackend(FusedBackend):
    """The oracle as a backend: any device, any float dtype; ``attention`` is torch's own autograd
    over ``sparse_attention_reference``, ``forward``/``backward`` the same passes written out (for
    strategies that merge blockwise results)."""

    name = "reference"
    priority = 0
    device_type = None
    supports_bias = True
    supports_edge_values = True

    def unsupported(self, q, tensors) -> str:
        first = q.device
        wrong = next((name for name, t in tensors.items() if t.device != first), None)
        return (
            f"all inputs must be on one device; '{wrong}' is on {tensors[wrong].device}, q on {first}" if wrong else ""
        )

    def attention(self, rowptr, col, q, k, v, scale: float, bias=None, edge_values=None):
        return sparse_attention_reference(rowptr, col, q, k, v, scale, bias, edge_values)

    def mean_forward(self, rowptr, col, v):
        y, lse = reference_forward(rowptr, col, None, None, v, 0.0)
        return y, lse

    def mean_backward(self, rowptr, col, dy, n_src: int):
        return reference_mean_backward(rowptr, col, dy, n_src)

    def forward(self, rowptr, col, q, k, v, scale: float, bias=None):
        y, lse = reference_forward(rowptr, col, q, k, v, scale, bias)
        return y, lse, (lse,)

    def backward(self, rowptr, col, q, k, v, y_acc, saved, dy, scale: float, needs, bias=None):
        return reference_backward(rowptr, col, q, k, v, y_acc, saved[0], dy, scale, bias)
