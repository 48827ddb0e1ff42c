"""numba kernels of the backward pass that goes with ``cpu_kernels_probs`` (its p [E, H] kept).

Per edge (i, j) and head h, with p_ij the forward's probability and delta_i = <dy_i, y_i>:
dp_ij = <dy_i, v_j>, ds_ij = p_ij (dp_ij - delta_i); then dq_i = scale * sum_j ds_ij k_j (a row
sum), dk_j = scale * sum_i ds_ij q_i and dv_j = sum_i p_ij dy_i (column sums). Two passes, one
thread per output row or column, a fixed order of additions, no atomics, no E x H array written:

- ``backward_rows_kernel`` (CSR order, first) lays out what the column pass gathers per edge as one
  span per destination row, packed [N_dst, 2*H*D + 2*H] = [q_i | dy_i | lse_i | delta_i] (delta
  computed here), then reads p in its own order, gathers k_j and v_j and forms ds_ij from
  <dy_i, v_j> to accumulate dq_i;
- ``backward_columns_kernel`` (CSC order) gathers the packed row of each in-edge's destination and
  recomputes p_ij = exp(scale <q_i, k_j> - lse_i) and ds_ij from it; k_j and v_j are the column's
  own, read in order. Reading the kept p instead would be a random access per edge (the CSR slot
  of a CSC edge), and so would writing ds for the row pass: those two cache misses per edge cost
  more than the second dot product and the exp (rmat:18, H=8, D=16: 282 ms against 167 ms).

k and v are gathered where they are (in huge pages, ``huge_pages.py``), as in the forward; a copy
of the two side by side cost more than it saved (rmat:18: row pass with the copy 180 ms, without
160 ms) and wrote 2 x N x H x D of fresh memory per call. The
packed rows do pay: gathering q_i, dy_i and [lse_i | delta_i] from three arrays instead made the
column pass 1.6-2x slower (rmat:18 and rmat:20, H=8, D=16), for the same 17 cache lines an edge.

Arrays are C-contiguous float32 or float64: q, dy, y, dq [N_dst, H, D]; lse [N_dst, H]; k, v, dk,
dv [N_src, H, D]; p [E, H] in CSR edge order; rowptr/colptr int64; col/row int32. Flat indices as
in ``cpu_simd``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from dsgraph.ops.cpu_prefetch import prefetch_span
from dsgraph.ops.cpu_simd import exp_diff, head_axpy, head_dots, softmax_grad
from dsgraph.ops.cpu_simd import scale as scale_into

_OPTIONS = dict(parallel=True, cache=True, error_model="numpy")
AHEAD = 16  # edges: prefetch the gathered rows of the edge this far ahead (8 measured the same on rmat:18)


def packed_width(heads: int, dim: int) -> int:
    """Floats per packed row: q_i and dy_i (H*D each), lse_i and delta_i (H each)."""
    return 2 * heads * dim + 2 * heads


@njit(inline="always")
def _pack_row(q, dy, y, lse, i, packed):
    """packed[i] = [q_i | dy_i | lse_i | delta_i] with delta_i[h] = <dy_ih, y_ih>."""
    heads, dim = q.shape[1], q.shape[2]
    width, base = heads * dim, i * packed.shape[1]
    scale_into(packed, base, 1.0, q, i * width, width)
    scale_into(packed, base + width, 1.0, dy, i * width, width)
    scale_into(packed, base + 2 * width, 1.0, lse, i * heads, heads)
    head_dots(packed, base + 2 * width + heads, dy, i * width, y, i * width, heads, dim, 1.0)


@njit(inline="always")
def _edge_grads(packed, base, k, v, j, scale, p, ds):
    """p [H] = exp(scale <q_i, k_j> - lse_i) and ds [H] = p (<dy_i, v_j> - delta_i), row i's
    packed span starting at flat index ``base``."""
    heads, dim = k.shape[1], k.shape[2]
    width = heads * dim
    head_dots(p, 0, packed, base, k, j * width, heads, dim, scale)
    exp_diff(p, 0, packed, base + 2 * width, heads)
    head_dots(ds, 0, packed, base + width, v, j * width, heads, dim, 1.0)
    softmax_grad(ds, 0, p, 0, ds, 0, packed, base + 2 * width + heads, heads)


@njit(**_OPTIONS)
def backward_columns_kernel(bounds, colptr, row, packed, k, v, scale, dk, dv):
    """dk_j = scale * sum_i ds_ij q_i and dv_j = sum_i p_ij dy_i over the rows i of column j,
    p and ds recomputed from packed row i (bounds: column blocks)."""
    heads, dim = k.shape[1], k.shape[2]
    width, stride = heads * dim, packed.shape[1]
    for b in prange(bounds.size - 1):
        p, ds = np.empty(heads, k.dtype), np.empty(heads, k.dtype)
        dk_acc, dv_acc = np.empty(width, k.dtype), np.empty(width, k.dtype)
        block_end = colptr[bounds[b + 1]]
        for j in range(bounds[b], bounds[b + 1]):
            dk_acc[:] = 0
            dv_acc[:] = 0
            for e in range(colptr[j], colptr[j + 1]):
                if e + AHEAD < block_end:
                    prefetch_span(packed, row[e + AHEAD] * stride, stride)
                base = row[e] * stride
                _edge_grads(packed, base, k, v, j, scale, p, ds)
                head_axpy(dv_acc, 0, p, 0, packed, base + width, heads, dim)
                head_axpy(dk_acc, 0, ds, 0, packed, base, heads, dim)
            scale_into(dk, j * width, scale, dk_acc, 0, width)
            scale_into(dv, j * width, 1.0, dv_acc, 0, width)


@njit(**_OPTIONS)
def backward_rows_kernel(bounds, rowptr, col, q, dy, y, lse, k, v, p, scale, packed, dq, need_q):
    """Packs every row (``_pack_row``) and, if need_q, dq_i = scale * sum_j p_ij (<dy_i, v_j> -
    delta_i) k_j over its edges (bounds: row blocks). Runs before the column pass, which gathers
    the packed rows; packing here rides on the row pass's gathers instead of a pass of its own."""
    heads, dim = k.shape[1], k.shape[2]
    width, stride = heads * dim, packed.shape[1]
    for b in prange(bounds.size - 1):
        ds, acc = np.empty(heads, k.dtype), np.empty(width, k.dtype)
        block_end = rowptr[bounds[b + 1]]
        for i in range(bounds[b], bounds[b + 1]):
            _pack_row(q, dy, y, lse, i, packed)
            if not need_q:
                continue
            acc[:] = 0
            base = i * stride
            for e in range(rowptr[i], rowptr[i + 1]):
                if e + AHEAD < block_end:
                    prefetch_span(k, col[e + AHEAD] * width, width)
                    prefetch_span(v, col[e + AHEAD] * width, width)
                j = col[e]
                head_dots(ds, 0, packed, base + width, v, j * width, heads, dim, 1.0)
                softmax_grad(ds, 0, p, e * heads, ds, 0, packed, base + 2 * width + heads, heads)
                head_axpy(acc, 0, ds, 0, k, j * width, heads, dim)
            scale_into(dq, i * width, scale, acc, 0, width)
