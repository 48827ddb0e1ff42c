"""The one-call autograd path of the CPU backend: forward keeps the probabilities p [E, H].

``sparse_attention(..., backend="cpu")`` runs here. Forward computes y, lse and p (fp32, or fp64 for
fp64 inputs; never an E x H x D tensor) in one pass per row (``cpu_kernels_probs``). Backward
(``cpu_kernels_probs_grad``) runs a row (CSR) pass that packs [q_i | dy_i | lse_i | delta_i] per
destination row, reads p in order and gathers k_j, v_j (dq), then a column (CSC) pass that gathers
the packed row per edge and recomputes p and ds from it (dk, dv). Neither pass touches an
E-sized array at random. Extra memory against the log-sum-exp kernels: E x H floats (p) saved from
forward to backward. The separate forward/backward API (``attention_forward`` and
``attention_backward``, whose y and lse may merge several source blocks) stays on ``cpu.py``.
Deterministic like those kernels: one thread per output row, a fixed order of additions.
The kernels gather k and v in place where torch put them in transparent huge pages
(``cpu_arrays.gather_source``; ``import dsgraph`` asks torch for them); beyond its outputs, a
call allocates only backward's packed rows. Autograd keeps the op's inputs q, k, v, so
saved-tensor hooks see the tensors the caller passed (GP-AG's ``regather_kv`` replaces its
gathered K and V there).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from dsgraph.ops import cpu_kernels_probs, huge_pages
from dsgraph.ops import cpu_kernels_probs_grad as grad
from dsgraph.ops.cpu_arrays import as_compute_array, as_int32, bounds, compute_dtype, gather_source, set_threads
from dsgraph.ops.csc import transpose


def forward_probs(rowptr, col, q, k, v, scale: float):
    """(y in q's dtype, y in the accumulation dtype, lse [N_dst, H], p [E, H] in CSR edge order)."""
    set_threads(col.numel() * q.shape[1])
    cdt = compute_dtype(q.dtype)
    q_ = as_compute_array(q, cdt)
    k_, v_ = gather_source(k, cdt), gather_source(v, cdt)
    rowptr_, col_ = rowptr.numpy(), as_int32(col).numpy()
    y = np.empty(q_.shape, dtype=q_.dtype)
    lse = np.empty(q_.shape[:2], dtype=q_.dtype)
    p = np.empty((col_.size, q_.shape[1]), dtype=q_.dtype)
    row_bounds = bounds(rowptr, col, rowptr_, "rows")
    cpu_kernels_probs.forward_probs_kernel(row_bounds, rowptr_, col_, q_, k_, v_, q_.dtype.type(scale), y, lse, p)
    y_acc = torch.from_numpy(y)
    return y_acc.to(q.dtype), y_acc, torch.from_numpy(lse), torch.from_numpy(p)


def backward_probs(rowptr, col, q, k, v, y_acc, lse, p, dy, scale: float, *, need_q: bool = True, need_kv: bool = True):
    """(dq, dk, dv) in the accumulation dtype from forward's y_acc, lse and p; dq None unless
    need_q, dk and dv None unless need_kv."""
    set_threads(col.numel() * q.shape[1])
    cdt = y_acc.dtype
    q_, y_, dy_ = (as_compute_array(t, cdt) for t in (q, y_acc, dy))
    # the row pass gathers k_j and v_j for dq; without dq it only packs the rows
    k_, v_ = (gather_source(t, cdt) if need_q else as_compute_array(t, cdt) for t in (k, v))
    scale_ = q_.dtype.type(scale)
    rowptr_, col_ = rowptr.numpy(), as_int32(col).numpy()
    row_bounds = bounds(rowptr, col, rowptr_, "rows")
    packed = huge_pages.empty((q_.shape[0], grad.packed_width(*q_.shape[1:])), q_.dtype)
    dq = np.empty(q_.shape if need_q else (0,) + q_.shape[1:], dtype=q_.dtype)
    grad.backward_rows_kernel(row_bounds, rowptr_, col_, q_, dy_, y_, lse.numpy(), k_, v_, p.numpy(), scale_, packed, dq, need_q)
    dq = torch.from_numpy(dq) if need_q else None
    dk = dv = None
    if need_kv:
        csc = transpose(rowptr, col, k_.shape[0])
        colptr_ = csc.colptr.numpy()
        dk, dv = np.empty(k_.shape, q_.dtype), np.empty(k_.shape, q_.dtype)
        col_bounds = bounds(rowptr, col, colptr_, "cols")
        grad.backward_columns_kernel(col_bounds, colptr_, csc.row.numpy(), packed, k_, v_, scale_, dk, dv)
        dk, dv = torch.from_numpy(dk), torch.from_numpy(dv)
    return dq, dk, dv


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
        with torch.profiler.record_function("dsgraph/attention/cpu_backward"):  # as FusedAttention's backward region
            grads = backward_probs(
                *ctx.graph, q, k, v, y_acc, lse, p, dy.detach(), ctx.scale, need_q=needs[0], need_kv=needs[1] or needs[2]
            )
        return None, None, *(g.to(t.dtype) if need else None for g, t, need in zip(grads, (q, k, v), needs)), None
