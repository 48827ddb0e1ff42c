"""The fused CPU backend of ``sparse_attention``: numba kernels, parallel over rows, in autograd.

``sparse_attention`` (one call, in autograd) runs the kernels that keep the probabilities
(``cpu_probs.py``). The separate forward/backward passes, whose y and lse a strategy may merge over
several source blocks, run the kernels here: forward is one online-softmax pass per (row, head) that
keeps only the log-sum-exp lse [N_dst, H] (fp32) for backward; backward recomputes the scores: dQ in a pass over rows (CSR), dK and dV in a pass
over the transpose (CSC, built once per graph and cached, see ``csc.py``). No atomics and a fixed
summation order: two backward runs give bit-identical gradients.

dtypes: fp32 computes in fp32; bf16 is converted to fp32 inside (numba has no bf16), which copies
N x H x D-sized tensors, never E-sized ones, and the outputs are cast back (y is also kept in fp32
for backward); fp64 computes in fp64 (for gradcheck). The kernels are compiled on first use and
cached on disk by numba.
"""

from __future__ import annotations

import numpy as np
import torch

from dsgraph.ops import cpu_kernels, cpu_probs
from dsgraph.ops.backend import INT32_MAX, FusedBackend, on_one_device
from dsgraph.ops.cpu_arrays import as_compute_array as _as_compute_array
from dsgraph.ops.cpu_arrays import as_int32 as _as_int32
from dsgraph.ops.cpu_arrays import bounds as _bounds
from dsgraph.ops.cpu_arrays import compute_dtype as _compute_dtype
from dsgraph.ops.cpu_arrays import set_threads as _set_threads
from dsgraph.ops.csc import transpose

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float64)


class CpuBackend(FusedBackend):
    """numba kernels on CPU tensors in fp32, bf16 (computed in fp32) or fp64 (for gradcheck)."""

    name = "cpu"
    priority = 10
    device_type = "cpu"

    def unsupported(self, q, tensors) -> str:
        if q.dtype not in SUPPORTED_DTYPES:
            return f"dtype {q.dtype} is not supported; use one of {SUPPORTED_DTYPES}"
        if max(tensors.get("k", q).shape[0], q.shape[0]) > INT32_MAX:
            return "node counts must stay below 2^31 (int32 node ids)"
        return on_one_device(tensors, "cpu")

    def attention(self, rowptr, col, q, k, v, scale: float) -> torch.Tensor:
        return cpu_probs.ProbsAttention.apply(rowptr, col, q, k, v, scale)

    def forward(self, rowptr, col, q, k, v, scale: float):
        return attention_forward(rowptr, col, q, k, v, scale)

    def backward(self, rowptr, col, q, k, v, y_acc, lse, dy, scale: float, needs):
        return attention_backward(rowptr, col, q, k, v, y_acc, lse, dy, scale, need_kv=needs[1] or needs[2])


def attention_forward(rowptr, col, q, k, v, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Returns y [N_dst, H, D] in q's dtype, the same y in the accumulation dtype (the same tensor
    unless q is bf16) and lse [N_dst, H] in the accumulation dtype (fp32; fp64 for fp64 inputs).

    Backward takes y in the accumulation dtype: delta_i = <dy_i, y_i> is a difference of nearly equal
    terms in dq, and a bf16-rounded y would cost its accuracy on rows with many edges.
    """
    _set_threads(col.numel() * q.shape[1])
    cdt = _compute_dtype(q.dtype)
    q_, k_, v_ = (_as_compute_array(t, cdt) for t in (q, k, v))
    rowptr_, col_ = rowptr.numpy(), _as_int32(col).numpy()
    y = np.empty(q_.shape, dtype=q_.dtype)
    lse = np.empty(q_.shape[:2], dtype=q_.dtype)
    bounds = _bounds(rowptr, col, rowptr_, "rows")
    cpu_kernels.forward_kernel(bounds, rowptr_, col_, q_, k_, v_, q_.dtype.type(scale), y, lse)
    y_acc = torch.from_numpy(y)
    return y_acc.to(q.dtype), y_acc, torch.from_numpy(lse)


def attention_backward(rowptr, col, q, k, v, y_acc, lse, dy, scale: float, *, need_kv: bool = True):
    """Returns (dq, dk, dv) in the inputs' dtype; dk and dv are None unless ``need_kv``.

    y_acc and lse are forward's outputs in the accumulation dtype; dy has y's shape, any strides."""
    _set_threads(col.numel() * q.shape[1])
    cdt = _compute_dtype(q.dtype)
    q_, k_, v_, y_, dy_ = (_as_compute_array(t, cdt) for t in (q, k, v, y_acc, dy))
    lse_ = lse.numpy()
    scale_ = q_.dtype.type(scale)
    rowptr_, col_ = rowptr.numpy(), _as_int32(col).numpy()
    dq = np.empty(q_.shape, dtype=q_.dtype)
    delta = np.empty(lse_.shape, dtype=q_.dtype)
    row_bounds = _bounds(rowptr, col, rowptr_, "rows")
    cpu_kernels.backward_rows_kernel(row_bounds, rowptr_, col_, q_, k_, v_, dy_, y_, lse_, scale_, dq, delta)
    dq_t = torch.from_numpy(dq).to(q.dtype)
    if not need_kv:
        return dq_t, None, None
    csc = transpose(rowptr, col, k.shape[0])
    colptr_, row_ = csc.colptr.numpy(), csc.row.numpy()
    dk = np.empty(k_.shape, dtype=q_.dtype)
    dv = np.empty(v_.shape, dtype=q_.dtype)
    col_bounds = _bounds(rowptr, col, colptr_, "cols")
    cpu_kernels.backward_cols_kernel(col_bounds, colptr_, row_, q_, k_, v_, dy_, lse_, delta, scale_, dk, dv)
    return dq_t, torch.from_numpy(dk).to(k.dtype), torch.from_numpy(dv).to(v.dtype)
