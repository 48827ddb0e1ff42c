"""The one-call autograd path of the CPU backend: forward keeps the probabilities p [E, H].

``sparse_attention(..., backend="cpu")`` runs here. Forward computes y, lse and p (fp32, or fp64 for
fp64 inputs; never an E x H x D tensor) in one pass per row (``cpu_kernels_probs``); backward reads
p instead of recomputing two dot products and an exp per edge-head in each of its two passes:
the column (CSC) pass takes one dot product per edge-head, <dy_i, v_j>, writes ds [E, H] and
accumulates dk, dv; the row pass then only accumulates dq = scale * sum_j ds_ij k_j.
Extra memory against the log-sum-exp kernels: E x H floats saved from forward to backward, and
E x H more (ds) during backward. The separate forward/backward API (``attention_forward`` and
``attention_backward``, whose y and lse may merge several source blocks) stays on ``cpu.py``.
Deterministic like those kernels: one thread per output row, a fixed order of additions.
The gathered arrays (k and v side by side for forward, q and dy side by side and k for backward)
are copied into transparent huge pages (``huge_pages.py``): N x H x D copies that save a TLB miss
on nearly every gathered row.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from dsgraph.ops import cpu_kernels, cpu_kernels_probs, huge_pages
from dsgraph.ops.cpu_arrays import as_compute_array, as_int32, bounds, compute_dtype, set_threads
from dsgraph.ops.csc import transpose


def forward_probs(rowptr, col, q, k, v, scale: float):
    """(y in q's dtype, y in the accumulation dtype, lse [N_dst, H], p [E, H]); p in CSR edge order."""
    set_threads(col.numel() * q.shape[1])
    cdt = compute_dtype(q.dtype)
    q_ = as_compute_array(q, cdt)
    kv = huge_pages.interleave(as_compute_array(k, cdt), as_compute_array(v, cdt))  # [N_src, 2, H, D]
    rowptr_, col_ = rowptr.numpy(), as_int32(col).numpy()
    y = np.empty(q_.shape, dtype=q_.dtype)
    lse = np.empty(q_.shape[:2], dtype=q_.dtype)
    p = np.empty((col_.size, q_.shape[1]), dtype=q_.dtype)
    row_bounds = bounds(rowptr, col, rowptr_, "rows")
    cpu_kernels_probs.forward_probs_kernel(row_bounds, rowptr_, col_, q_, kv, q_.dtype.type(scale), y, lse, p)
    y_acc = torch.from_numpy(y)
    return y_acc.to(q.dtype), y_acc, torch.from_numpy(lse), torch.from_numpy(p)


def backward_probs(rowptr, col, q, k, v, y_acc, lse, p, dy, scale: float, *, need_kv: bool = True):
    """(dq, dk, dv) in the inputs' dtype from forward's y_acc, lse and p; dk, dv None unless need_kv."""
    set_threads(col.numel() * q.shape[1])
    cdt = compute_dtype(q.dtype)
    q_, k_, v_, y_, dy_ = (as_compute_array(t, cdt) for t in (q, k, v, y_acc, dy))
    rowptr_, col_ = rowptr.numpy(), as_int32(col).numpy()
    scale_ = q_.dtype.type(scale)
    row_bounds = bounds(rowptr, col, rowptr_, "rows")
    dq = np.empty(q_.shape, dtype=q_.dtype)
    delta = np.empty(q_.shape[:2], dtype=q_.dtype)
    if not need_kv:  # dq alone: the recomputing row pass needs no ds
        cpu_kernels.backward_rows_kernel(row_bounds, rowptr_, col_, q_, k_, v_, dy_, y_, lse.numpy(), scale_, dq, delta)
        return torch.from_numpy(dq).to(q.dtype), None, None
    cpu_kernels_probs.row_deltas_kernel(row_bounds, dy_, y_, delta)
    csc = transpose(rowptr, col, k.shape[0])
    colptr_ = csc.colptr.numpy()
    dk, dv, ds = np.empty(k_.shape, dtype=q_.dtype), np.empty(v_.shape, dtype=q_.dtype), np.empty_like(p.numpy())
    col_bounds = bounds(rowptr, col, colptr_, "cols")
    qdy = huge_pages.interleave(q_, dy_)  # [N_dst, 2, H, D]: the column pass gathers both per edge
    cpu_kernels_probs.backward_cols_probs_kernel(
        col_bounds, colptr_, csc.row.numpy(), csc.perm.numpy(), qdy, v_, p.numpy(), delta, scale_, dk, dv, ds
    )
    del qdy
    cpu_kernels_probs.backward_rows_probs_kernel(row_bounds, rowptr_, col_, huge_pages.copy(k_), ds, scale_, dq)
    return tuple(torch.from_numpy(t).to(dtype) for t, dtype in ((dq, q.dtype), (dk, k.dtype), (dv, v.dtype)))


class ProbsAttention(torch.autograd.Function):
    """sparse attention on CPU tensors, saving q, k, v, y (accumulation dtype), lse and p."""

    @staticmethod
    def forward(ctx, rowptr, col, q, k, v, scale):
        y, y_acc, lse, p = forward_probs(rowptr, col, q.detach(), k.detach(), v.detach(), scale)
        ctx.save_for_backward(q, k, v, y_acc, lse, p)
        ctx.graph, ctx.scale = (rowptr, col), scale
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        q, k, v, y_acc, lse, p = (t.detach() for t in ctx.saved_tensors)
        needs = tuple(ctx.needs_input_grad[2:5])
        grads = backward_probs(*ctx.graph, q, k, v, y_acc, lse, p, dy.detach(), ctx.scale, need_kv=needs[1] or needs[2])
        return None, None, *(g if need else None for g, need in zip(grads, needs)), None
