"""numba kernels of constant scores (``ops/mean.py``): each row's mean of its in-neighbours' v.

Forward (``mean_rows_kernel``, CSR order): y_i = (1/d_i) sum_j v_j, one sweep over the row's edges
that gathers v_j where it is and adds it to the row's accumulator (0 for rows without edges).
Backward (``mean_columns_kernel``, CSC order): dv_j = sum_i dy_i / d_i over the rows i that read
j, gathering dy_i and the row's 1/d_i. The rows of [N, H, D] arrays are taken whole (H * D
elements: every head has the same weight), so there are no scores, no exp and no per-edge array:
the attention's forward reads k_j and v_j, writes p [E, H] and takes an exp per edge-head, and its
backward reads p, q_i, dy_i, then k_j again. One thread per output row or column, a fixed order of
additions, no atomics.

Arrays are C-contiguous float32 or float64: v, dv [N_src, H, D]; y, dy [N_dst, H, D]; inv_degrees
[N_dst] (1/d_i, 0 without edges); rowptr/colptr int64; col/row int32.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from dsgraph.ops.cpu.prefetch import prefetch_span
from dsgraph.ops.cpu.simd import add, head_axpy
from dsgraph.ops.cpu.simd import scale as scale_into

_OPTIONS = dict(parallel=True, cache=True, error_model="numpy")
AHEAD = 8  # edges: prefetch the gathered row of the edge this far ahead


@njit(**_OPTIONS)
def mean_rows_kernel(bounds, rowptr, col, v, inv_degrees, y):
    """y_i = inv_degrees[i] * sum of v_j over the edges of row i (bounds: row blocks)."""
    width = v.shape[1] * v.shape[2]
    for b in prange(bounds.size - 1):
        acc = np.empty(width, v.dtype)
        block_end = rowptr[bounds[b + 1]]
        for i in range(bounds[b], bounds[b + 1]):
            acc[:] = 0
            for e in range(rowptr[i], rowptr[i + 1]):
                if e + AHEAD < block_end:
                    prefetch_span(v, col[e + AHEAD] * width, width)
                add(acc, 0, v, col[e] * width, width)
            scale_into(y, i * width, inv_degrees[i], acc, 0, width)


@njit(**_OPTIONS)
def mean_columns_kernel(bounds, colptr, row, dy, inv_degrees, dv):
    """dv_j = sum of inv_degrees[i] * dy_i over the rows i of column j (bounds: column blocks)."""
    width = dy.shape[1] * dy.shape[2]
    for b in prange(bounds.size - 1):
        acc = np.empty(width, dy.dtype)
        block_end = colptr[bounds[b + 1]]
        for j in range(bounds[b], bounds[b + 1]):
            acc[:] = 0
            for e in range(colptr[j], colptr[j + 1]):
                if e + AHEAD < block_end:
                    prefetch_span(dy, row[e + AHEAD] * width, width)
                head_axpy(acc, 0, inv_degrees, row[e], dy, row[e] * width, 1, width)
            scale_into(dv, j * width, 1.0, acc, 0, width)
