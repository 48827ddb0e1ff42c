"""The one-call autograd path of the CPU backend: forward keeps the probabilities p [E, H].

``sparse_attention(..., backend="cpu")`` runs here. Forward computes y and p (fp32, or fp64 for
fp64 inputs; never an E x H x D tensor) in one pass per row (``cpu_kernels_probs``). Backward
(``cpu_kernels_probs_grad``) computes delta_i = <dy_i, y_i>, then a column (CSC) pass gathers q_i,
dy_i and p_ij per in-edge for dk and dv and writes ds [E, H] in CSC order, then a row (CSR) pass
reads ds and gathers k_j for dq. Extra memory against the log-sum-exp kernels: E x H floats (p)
saved from forward to backward, and ds within backward; the per-graph structures are the
transpose and the CSC slot of every CSR edge (``csc.py``). The separate forward/backward API
(``attention_forward`` and ``attention_backward``, whose y and lse may merge several source
blocks) stays on ``cpu.py``. Deterministic like those kernels: one thread per output row or
column, a fixed order of additions. The kernels gather where torch put the tensors, in
transparent huge pages (``cpu_arrays.gather_source``; ``import dsgraph`` asks torch for them), and
every output and work array comes from torch's allocator too: in huge pages, the random reads of
p and ds cost no TLB miss per edge and first writes fault 512x fewer pages. Autograd keeps the
op's inputs q, k, v, so saved-tensor hooks see the tensors the caller passed (GP-AG's
``regather_kv`` replaces its gathered K and V there).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from dsgraph.ops import cpu_kernels_probs
from dsgraph.ops import cpu_kernels_probs_grad as grad
from dsgraph.ops.cpu_arrays import as_compute_array, as_int32, bounds, compute_dtype, gather_source, set_threads
from dsgraph.ops.csc import csc_slots, transpose


def forward_probs(rowptr, col, q, k, v, scale: float):
    """(y in q's dtype, y in the accumulation dtype, p [E, H] in CSR edge order)."""
    set_threads(col.numel() * q.shape[1])
    cdt = compute_dtype(q.dtype)
    q_ = as_compute_array(q, cdt)
    k_, v_ = gather_source(k, cdt), gather_source(v, cdt)
    rowptr_, col_ = rowptr.numpy(), as_int32(col).numpy()
    y, p = torch.empty(q_.shape, dtype=cdt), torch.empty((col_.size, q_.shape[1]), dtype=cdt)
    row_bounds = bounds(rowptr, col, rowptr_, "rows")
    cpu_kernels_probs.forward_probs_kernel(row_bounds, rowptr_, col_, q_, k_, v_, q_.dtype.type(scale), y.numpy(), p.numpy())
    return y.to(q.dtype), y, p


def backward_probs(rowptr, col, q, k, v, y_acc, p, dy, scale: float, *, need_q: bool = True, need_kv: bool = True):
    """(dq, dk, dv) in the accumulation dtype from forward's y_acc and p; dq None unless need_q,
    dk and dv None unless need_kv. The passes: ``cpu_kernels_probs_grad``."""
    set_threads(col.numel() * q.shape[1])
    cdt = y_acc.dtype
    dy_ = gather_source(dy, cdt)
    k_ = gather_source(k, cdt) if need_q else as_compute_array(k, cdt)  # gathered only for dq
    scale_ = dy_.dtype.type(scale)
    rowptr_ = rowptr.numpy()
    row_bounds = bounds(rowptr, col, rowptr_, "rows")
    delta = torch.empty(dy_.shape[:2], dtype=cdt)
    grad.row_deltas_kernel(row_bounds, dy_, as_compute_array(y_acc, cdt), delta.numpy())

    csc = transpose(rowptr, col, k.shape[0])
    colptr_ = csc.colptr.numpy()
    q_ = gather_source(q, cdt) if need_kv else dy_[:0]  # q is read only for dk
    dk, dv = (torch.empty(k_.shape if need_kv else (0, *k_.shape[1:]), dtype=cdt) for _ in range(2))  # one kernel signature
    ds = torch.empty(p.numel() if need_q else 0, dtype=cdt)  # [E, H] in CSC order, for dq
    grad.backward_columns_kernel(
        bounds(rowptr, col, colptr_, "cols"), colptr_, csc.row.numpy(), csc.perm.numpy(), q_, dy_, delta.numpy(),
        k_, as_compute_array(v, cdt), p.numpy().reshape(-1), scale_, dk.numpy(), dv.numpy(), ds.numpy(), need_q, need_kv,
    )
    dq = None
    if need_q:
        dq = torch.empty(dy_.shape, dtype=cdt)
        slots = csc_slots(rowptr, col, k.shape[0]).numpy()
        grad.backward_rows_kernel(row_bounds, rowptr_, as_int32(col).numpy(), slots, k_, ds.numpy(), scale_, dq.numpy())
    return dq, (dk if need_kv else None), (dv if need_kv else None)


class ProbsAttention(torch.autograd.Function):
    """sparse attention on CPU tensors, saving q, k, v, y (accumulation dtype) and p."""

    @staticmethod
    def forward(ctx, rowptr, col, q, k, v, scale):
        y, y_acc, p = forward_probs(rowptr, col, q.detach(), k.detach(), v.detach(), scale)
        ctx.save_for_backward(q, k, v, y_acc, p)
        ctx.graph, ctx.scale = (rowptr, col), scale
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        q, k, v, y_acc, p = (t.detach() for t in ctx.saved_tensors)
        needs = tuple(ctx.needs_input_grad[2:5])
        with torch.profiler.record_function("dsgraph/attention/cpu_backward"):  # as FusedAttention's backward region
            grads = backward_probs(
                *ctx.graph, q, k, v, y_acc, p, dy.detach(), ctx.scale, need_q=needs[0], need_kv=needs[1] or needs[2]
            )
        return None, None, *(g.to(t.dtype) if need else None for g, t, need in zip(grads, (q, k, v), needs)), None
