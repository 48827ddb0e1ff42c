"""The fused CPU backend of ``sparse_attention``: numba kernels, parallel over rows.

Forward (``forward_kernel``) computes y and the log-sum-exp lse [N, H] (fp32, or fp64 for fp64
inputs; never an E x H x D tensor), and the probabilities p [E, H] only when they are kept, in one
pass per row. Backward
(``backward_kernels``) computes delta_i = <dy_i, y_i>, then a column (CSC) pass gathers q_i, dy_i
and recomputes p_ij from lse (or reads the forward's p, when kept) per in-edge for dk and dv and
writes ds [E, H] in CSC order (bfloat16 in a bf16 backward, ``DS_IN_BF16``), then a row (CSR) pass
reads ds and gathers k_j for dq (in chunks of rows for bf16, each cast into dq). What forward
hands to backward (``saved``) is lse, or p and lse (``KEEP_PROBABILITIES``, edge values); lse also
serves callers that merge blocks of sources (``dispatch.attention_forward``). A score bias [E, H] is added to the
scores as the forward writes them; the column pass writes its gradient (ds in CSR order, once per
edge-head). Edge values' row sums (z from p forward, their score gradient from dz backward) are
``edge_value_kernels``. Constant scores (q = k = None, ``ops/mean.py``) run ``mean_kernels``: one
row pass forward, one column pass backward, no scores. The per-graph structures are the
transpose and the CSC slot of every CSR edge (``csc.py``). Deterministic: one thread per output row
or column, a fixed order of additions, no atomics.

The kernels gather where torch put the tensors, in transparent huge pages
(``arrays.gather_source``; ``import dsgraph`` asks torch for them), and every output and work array
comes from torch's allocator too: in huge pages, the random reads of p and ds cost no TLB miss per
edge and first writes fault 512x fewer pages.

dtypes: fp32 computes in fp32; bf16 is converted to fp32 inside (numba has no bf16), which copies
N x H x D-sized tensors, never E-sized ones, and the outputs are cast back by the caller; fp64
computes in fp64 (for gradcheck). The kernels are compiled on first use and cached on disk by numba.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from dsgraph.ops.backend import INT32_MAX, FusedBackend, on_one_device
from dsgraph.ops.cpu import backward_kernels, edge_value_kernels, mean_kernels
from dsgraph.ops.cpu.arrays import (
    BLOCKS_PER_THREAD,
    as_compute_array,
    as_int32,
    bounds,
    compute_dtype,
    gather_source,
    set_threads,
    work_blocks,
)
from dsgraph.ops.cpu.forward_kernel import forward_kernel
from dsgraph.ops.csc import csc_slots, transpose
from dsgraph.ops.mean import inverse_degrees, mean_lse

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float64)
KEEP_PROBABILITIES = False
"""Whether the forward keeps p [E, H] (fp32) for backward by default. No: backward recomputes each
p_ij = exp(scale <q_i, k_j> + bias_ij - lse_i) where it needs it, one dot product and one exp per
edge-head, and a layer keeps lse [N, H] instead of E x H values (4 bytes an edge-head: at 16 edges a
node and 8 heads, more than a bf16 row of d = 64). Edge values keep p (their forward reads it)."""
ROW_CHUNK_VALUES = 1 << 23
"""Values of dq per chunk of the backward's row pass for bf16 inputs (32 MB in fp32): the
accumulation-dtype dq exists a chunk at a time, each chunk cast into the bf16 dq before the next."""
DS_IN_BF16 = True
"""Whether a bf16 backward keeps ds [E, H] between its column and row passes as bfloat16 (2 bytes an
edge-head) instead of fp32; dq sums those rounded values in fp32 (``_score_gradients``)."""
COLUMN_CHUNK_VALUES = 1 << 23
"""Values of v per chunk of the backward's column pass (32 MB in fp32): bounds the accumulation-dtype
copy of v and the dk, dv it writes to a chunk, not all source rows, for bf16 inputs."""


class CpuBackend(FusedBackend):
    """numba kernels on CPU tensors in fp32, bf16 (computed in fp32) or fp64 (for gradcheck)."""

    name = "cpu"
    priority = 10
    device_type = "cpu"
    supports_bias = True
    supports_edge_values = True
    keeps_probabilities = True
    delta_from_output = True

    def unsupported(self, q, tensors) -> str:
        if q.dtype not in SUPPORTED_DTYPES:
            return f"dtype {q.dtype} is not supported; use one of {SUPPORTED_DTYPES}"
        if max(tensors.get("k", q).shape[0], q.shape[0]) > INT32_MAX:
            return "node counts must stay below 2^31 (int32 node ids)"
        return on_one_device(tensors, "cpu")

    def forward(self, rowptr, col, q, k, v, scale: float, bias=None, keep_probabilities: bool | None = None):
        """``saved``: (p, lse) when the probabilities are kept (``keep_probabilities``, default
        ``KEEP_PROBABILITIES``; edge values need them), else (lse,): backward recomputes p."""
        keep = KEEP_PROBABILITIES if keep_probabilities is None else keep_probabilities
        y, p, lse = forward(rowptr, col, q, k, v, scale, bias, keep_p=keep)
        return y, lse, ((p, lse) if keep else (lse,))

    def mean_forward(self, rowptr, col, v):
        set_threads(col.numel() * v.shape[1])
        cdt = compute_dtype(v.dtype)
        rowptr_ = rowptr.numpy()
        y = torch.empty((rowptr.numel() - 1, *v.shape[1:]), dtype=cdt)
        mean_kernels.mean_rows_kernel(
            bounds(rowptr, col, rowptr_, "rows"),
            rowptr_,
            as_int32(col).numpy(),
            gather_source(v, cdt),
            inverse_degrees(rowptr, cdt).numpy(),
            y.numpy(),
        )
        return y, mean_lse(rowptr, v.shape[1], cdt)

    def mean_backward(self, rowptr, col, dy, n_src: int):
        set_threads(col.numel() * dy.shape[1])
        cdt = compute_dtype(dy.dtype)
        csc = transpose(rowptr, col, n_src)
        colptr_ = csc.colptr.numpy()
        dv = torch.empty((n_src, *dy.shape[1:]), dtype=cdt)
        mean_kernels.mean_columns_kernel(
            bounds(rowptr, col, colptr_, "cols"),
            colptr_,
            csc.row.numpy(),
            gather_source(dy, cdt),
            inverse_degrees(rowptr, cdt).numpy(),
            dv.numpy(),
        )
        return dv

    def probabilities(self, saved):
        """The forward's probabilities p [E, H] (CSR order, accumulation dtype), when kept."""
        if len(saved) != 2:
            raise ValueError("the forward did not keep its probabilities (forward(..., keep_probabilities=True))")
        return saved[0]

    def value_sum(self, rowptr, col, p_EH, u_EC):
        z = torch.empty((rowptr.numel() - 1, p_EH.shape[1], u_EC.shape[1]), dtype=p_EH.dtype)
        _edge_value_pass(edge_value_kernels.value_sum_kernel, rowptr, col, p_EH, u_EC.to(p_EH.dtype), z)
        return z

    def value_grad(self, rowptr, col, dz_NHC, u_EC):
        g = torch.empty((col.numel(), dz_NHC.shape[1]), dtype=dz_NHC.dtype)
        _edge_value_pass(edge_value_kernels.value_grad_kernel, rowptr, col, dz_NHC, u_EC.to(dz_NHC.dtype), g)
        return g

    def backward(
        self, rowptr, col, q, k, v, y_acc, saved, dy, scale: float, needs, bias=None, dp_extra=None, delta_extra=None
    ):
        need_bias = bias is not None and (len(needs) < 4 or needs[3])
        dq, dk, dv, dbias = backward(
            rowptr,
            col,
            q,
            k,
            v,
            y_acc,
            saved[0] if len(saved) == 2 else None,
            dy,
            scale,
            lse=saved[-1],
            bias=bias,
            need_q=needs[0],
            need_kv=needs[1] or needs[2],
            need_bias=need_bias,
            dp_extra=dp_extra,
            delta_extra=delta_extra,
            out_dtype=q.dtype,
        )
        return dq, dk, dv, None if dbias is None else dbias.to(bias.dtype)


def forward(rowptr, col, q, k, v, scale: float, bias=None, keep_p: bool = True):
    """(y [N_dst, H, D], p [E, H] in CSR edge order, lse [N_dst, H]), all in the accumulation dtype;
    ``bias`` [E, H] (CSR order) is added to the scores. Without ``keep_p`` p is empty [0, H] and
    never written (the kernel keeps each row's scores in a work array)."""
    set_threads(col.numel() * q.shape[1])
    cdt = compute_dtype(q.dtype)
    q_ = as_compute_array(q, cdt)
    k_, v_ = gather_source(k, cdt), gather_source(v, cdt)
    rowptr_, col_ = rowptr.numpy(), as_int32(col).numpy()
    y, p = torch.empty(q_.shape, dtype=cdt), torch.empty((col_.size if keep_p else 0, q_.shape[1]), dtype=cdt)
    lse = torch.empty(q_.shape[:2], dtype=cdt)
    bias_ = as_compute_array(bias, cdt) if bias is not None else np.empty((0, q_.shape[1]), q_.dtype)
    row_bounds = bounds(rowptr, col, rowptr_, "rows")
    forward_kernel(
        row_bounds,
        rowptr_,
        col_,
        q_,
        k_,
        v_,
        q_.dtype.type(scale),
        bias_,
        bias is not None,
        y.numpy(),
        p.numpy().reshape(-1),
        keep_p,
        lse.numpy(),
    )
    return y, p, lse


def _edge_value_pass(kernel, rowptr, col, a, u, out) -> None:
    """One of ``edge_value_kernels`` over the rows: ``a`` (p [E, H] or dz [N, H, C]) and ``u`` [E, C]
    in ``out``'s dtype, into ``out``."""
    set_threads(col.numel() * a.shape[1])
    rowptr_ = rowptr.numpy()
    kernel(
        bounds(rowptr, col, rowptr_, "rows"),
        rowptr_,
        a.detach().contiguous().numpy(),
        u.detach().contiguous().numpy(),
        out.numpy(),
    )


def backward(
    rowptr,
    col,
    q,
    k,
    v,
    y_acc,
    p,
    dy,
    scale: float,
    *,
    lse=None,
    bias=None,
    need_q: bool = True,
    need_kv: bool = True,
    need_bias: bool = False,
    dp_extra=None,
    delta_extra=None,
    out_dtype=None,
):
    """(dq, dk, dv, dbias) from forward's output (y_acc: in fp32, or the bf16 output itself) and p
    (None: recomputed per edge from q, k, the forward's ``lse`` and the score ``bias``, if any): dq,
    dk, dv in ``out_dtype`` (default: the accumulation dtype), dbias (ds [E, H] in CSR order) in the
    accumulation dtype; dq None unless need_q, dk and dv None unless need_kv, dbias None unless
    need_bias. ``dp_extra`` [E, H] (CSR order) and ``delta_extra`` [N_dst, H]: what edge values add
    to each score's upstream gradient and to delta (``edge_values.py``). The passes:
    ``backward_kernels``. Memory: k's compute copy is made only for the row pass, after the column
    pass's copies of q and v (v and dk, dv a chunk of columns at a time) are gone."""
    set_threads(col.numel() * q.shape[1])
    cdt = compute_dtype(y_acc.dtype)
    out_dtype = out_dtype or cdt
    dy_ = gather_source(dy, cdt)
    scale_ = dy_.dtype.type(scale)
    rowptr_ = rowptr.numpy()
    row_bounds = bounds(rowptr, col, rowptr_, "rows")
    # y_acc may be the bf16 output (delta_from_output): its fp32 copy lives only for this kernel
    delta = torch.empty(dy_.shape[:2], dtype=cdt)
    backward_kernels.row_deltas_kernel(row_bounds, dy_, as_compute_array(y_acc, cdt), delta.numpy())
    if delta_extra is not None:
        delta += delta_extra.to(cdt)
    extra = as_compute_array(dp_extra, cdt).reshape(-1) if dp_extra is not None else None
    recompute = None if p is not None else (lse.to(cdt).contiguous(), bias)
    dk, dv, ds, dbias = _column_pass(
        rowptr, col, q, k, v, p, recompute, dy_, delta, scale_, extra, need_q, need_kv, need_bias, out_dtype
    )
    dk, dv = (dk, dv) if need_kv else (None, None)
    del dy_, delta
    dq = _row_pass(rowptr, col, k, ds, scale_, q.shape, out_dtype) if need_q else None
    return dq, dk, dv, (dbias if need_bias else None)


def _row_pass(rowptr, col, k, ds, scale_, shape, out_dtype):
    """``backward``'s pass over the rows: dq [N_dst, H, D] in ``out_dtype`` from ds (CSC order). In
    the accumulation dtype the kernel writes dq itself; otherwise it writes chunks of about
    ``ROW_CHUNK_VALUES`` values, each cast into dq before the next, so no full-size copy exists."""
    half = ds.dtype == torch.uint16  # bfloat16 bits (``_score_gradients``)
    cdt = torch.float32 if half else ds.dtype
    rowptr_, col_, ds_ = rowptr.numpy(), as_int32(col).numpy(), ds.numpy()
    slots, k_ = csc_slots(rowptr, col, k.shape[0]).numpy(), gather_source(k, cdt)
    dq = torch.empty(shape, dtype=out_dtype)
    n_dst, width = shape[0], shape[1] * shape[2]
    step = max(n_dst, 1) if out_dtype == cdt else max(1, ROW_CHUNK_VALUES // max(width, 1))
    for first in range(0, n_dst, step):
        last = min(first + step, n_dst)
        part = dq[first:last] if out_dtype == cdt else torch.empty((last - first, *shape[1:]), dtype=cdt)
        blocks = _chunk_bounds(rowptr, col, rowptr_, first, last, "rows")
        backward_kernels.backward_rows_kernel(blocks, rowptr_, col_, slots, k_, ds_, scale_, part.numpy(), first)
        if out_dtype != cdt:
            dq[first:last] = part
    return dq


def _column_pass(rowptr, col, q, k, v, p, recompute, dy_, delta, scale_, extra, need_q, need_kv, need_bias, out_dtype):
    """``backward``'s pass over the columns (the CSC transpose): (dk, dv in ``out_dtype``, ds, dbias),
    each empty unless needed; ds [E, H] in CSC order, for the rows' dq; dbias [E, H] in CSR order.
    ``extra``: the edge values' dp_extra, flat, or None. ``recompute``: None (p is the forward's),
    or (lse, bias or None) to recompute p per edge (each column reads its own k_j). The columns go in chunks of about
    ``COLUMN_CHUNK_VALUES`` values of v: only a chunk's compute copy of v and its dk and dv are in
    the accumulation dtype at a time (each column reads its own v_j and writes its own dk_j, dv_j)."""
    cdt = delta.dtype
    has_extra = extra is not None
    extra = extra if has_extra else delta.numpy().reshape(-1)[:0]  # one kernel signature
    csc = transpose(rowptr, col, k.shape[0])
    colptr_ = csc.colptr.numpy()
    p_, probabilities = _probability_arrays(p, recompute, delta)
    keep_p = probabilities[0]
    q_ = gather_source(q, cdt) if need_kv or not keep_p else dy_[:0]  # q is read for dk and to recompute p
    ds = _score_gradients(col.numel() * k.shape[1] if need_q else 0, cdt, out_dtype)  # [E, H] in CSC order, for dq
    dbias = torch.empty((col.numel() if need_bias else 0, k.shape[1]), dtype=cdt)  # [E, H] in CSR order
    n_src, width = k.shape[0], k.shape[1] * k.shape[2]
    step = max(1, COLUMN_CHUNK_VALUES // max(width, 1))
    whole = step >= n_src  # one chunk: the kernel writes dk and dv themselves (cast after for bf16)
    shape = k.shape if need_kv and not whole else (0, *k.shape[1:])
    dk, dv = (torch.empty(shape, dtype=out_dtype) for _ in range(2))
    for first in range(0, max(n_src, 1), step):
        last = min(first + step, n_src)
        # dk and dv are allocated (empty) even when not needed: one kernel signature; k gives only its shape
        rows = slice(first, last) if need_kv else slice(0, 0)
        dk_, dv_ = (torch.empty((rows.stop - rows.start, *k.shape[1:]), dtype=cdt) for _ in range(2))
        backward_kernels.backward_columns_kernel(
            _chunk_bounds(rowptr, col, colptr_, first, last),
            colptr_,
            csc.row.numpy(),
            csc.perm.numpy(),
            q_,
            dy_,
            delta.numpy(),
            np.empty((0, *k.shape[1:]), dy_.dtype) if keep_p else as_compute_array(k[first:last], cdt),
            as_compute_array(v[first:last], cdt),
            p_,
            scale_,
            dk_.numpy(),
            dv_.numpy(),
            ds.numpy(),
            need_q,
            need_kv,
            dbias.numpy().reshape(-1),
            need_bias,
            extra,
            has_extra,
            first,
            probabilities,
        )
        if need_kv and whole:
            dk, dv = dk_.to(out_dtype), dv_.to(out_dtype)
        elif need_kv:
            dk[rows], dv[rows] = dk_, dv_
    return dk, dv, ds, dbias


def _score_gradients(size: int, cdt, out_dtype) -> torch.Tensor:
    """The column pass's ds for the row pass, flat [E * H]: in the accumulation dtype, or as
    bfloat16 bits (uint16) when dq is bf16 anyway (``DS_IN_BF16``; FlashAttention-2 also rounds dS
    to the inputs' dtype before its dQ product), half the bytes."""
    if DS_IN_BF16 and out_dtype == torch.bfloat16 and cdt == torch.float32:
        return torch.empty(size, dtype=torch.uint16)
    return torch.empty(size, dtype=cdt)


def _probability_arrays(p, recompute, delta) -> tuple:
    """(p flat or empty, (keep_p, lse flat, bias flat, has_bias)) for the column kernel: the forward's p
    (``recompute`` None), or the lse and bias (``recompute`` = (lse, bias or None)) to recompute it."""
    empty = delta.numpy().reshape(-1)[:0]  # one kernel signature: empty arrays of the accumulation dtype
    if recompute is None:
        return p.numpy().reshape(-1), (True, empty, empty, False)
    lse, bias = recompute
    bias_ = as_compute_array(bias, delta.dtype).reshape(-1) if bias is not None else empty
    return empty, (False, lse.numpy().reshape(-1), bias_, bias is not None)


def _chunk_bounds(rowptr, col, ptr_: np.ndarray, first: int, last: int, kind: str = "cols") -> np.ndarray:
    """Work blocks over columns (``kind`` 'cols', ``ptr_`` the colptr) or rows ('rows', the rowptr)
    ``first..last-1`` (all of them: the graph's cached blocks)."""
    if first == 0 and last >= ptr_.size - 1:
        return bounds(rowptr, col, ptr_, kind)
    blocks = work_blocks(ptr_[first : last + 1] - ptr_[first], BLOCKS_PER_THREAD * numba.get_num_threads())
    return blocks + first
