"""numba kernels of the fused CPU backend (the autograd wrapper is in ``cpu.py``).

Every kernel walks a compressed sparse structure segment by segment (a row of the CSR or a column of
the CSC) and heads inside a segment, in parallel over ``bounds`` blocks of consecutive segments
(``bounds`` int64 [B+1], chosen so that blocks carry about equal work). One thread owns each output
row and adds its terms in edge order, so results are deterministic and need no atomics. Nothing of
size E x H (let alone E x H x D) is allocated: scores are recomputed where needed.

Arrays are float32 (fp32 and bf16 inputs) or float64 (for gradcheck): q [N_dst, H, D],
k, v [N_src, H, D], rowptr/colptr int64, col/row int32, lse and delta [N_dst, H].
``scale`` is passed in the arrays' dtype so that all arithmetic stays in that dtype.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from dsgraph.ops.cpu_prefetch import prefetch_row

# Reassociation lets LLVM vectorise the D-loops; no 'nnan'/'ninf', the kernels rely on -inf.
_FASTMATH = {"reassoc", "contract"}
_OPTIONS = dict(parallel=True, cache=True, fastmath=_FASTMATH, error_model="numpy")
AHEAD = 8  # edges: gather the H x D rows of the edge this far ahead (software prefetch)


@njit(inline="always", fastmath=_FASTMATH)
def _dot(a, i, b, j, h):
    """<a[i, h, :], b[j, h, :]> in the arrays' dtype."""
    acc = a[i, h, 0] * 0
    for d in range(a.shape[2]):
        acc += a[i, h, d] * b[j, h, d]
    return acc


@njit(**_OPTIONS)
def forward_kernel(bounds, rowptr, col, q, k, v, scale, y, lse):
    """y[i, h] = softmax-weighted sum of v over row i; lse[i, h] = log-sum-exp of its scores.

    One online-softmax pass per row, all heads of an edge together (k[j] and v[j] are read as one
    contiguous H x D block): the running max (kept in lse) only moves up, and the running sum and
    the accumulator (kept in y itself) are rescaled when it does. Empty rows: y = 0, lse = -inf.
    """
    heads, dim = q.shape[1], q.shape[2]
    k_flat, v_flat = k.reshape(-1), v.reshape(-1)
    for b in prange(bounds.size - 1):
        total = np.empty_like(lse[0])  # running softmax denominators of one row, [H]
        block_end = rowptr[bounds[b + 1]]
        for i in range(bounds[b], bounds[b + 1]):
            y[i] = 0
            lse[i] = -np.inf  # the running max until the row is done
            total[:] = 0
            for e in range(rowptr[i], rowptr[i + 1]):
                if e + AHEAD < block_end:
                    prefetch_row(k_flat, col[e + AHEAD], heads * dim)
                    prefetch_row(v_flat, col[e + AHEAD], heads * dim)
                j = col[e]
                for h in range(heads):
                    s = scale * _dot(q, i, k, j, h)
                    if s > lse[i, h]:  # new maximum (always on the first edge): rescale the sums
                        c = np.exp(lse[i, h] - s)
                        total[h] = total[h] * c + 1
                        for d in range(dim):
                            y[i, h, d] = y[i, h, d] * c + v[j, h, d]
                        lse[i, h] = s
                    else:
                        p = np.exp(s - lse[i, h])
                        total[h] += p
                        for d in range(dim):
                            y[i, h, d] += p * v[j, h, d]
            if rowptr[i + 1] > rowptr[i]:
                for h in range(heads):
                    inv = 1 / total[h]
                    for d in range(dim):
                        y[i, h, d] *= inv
                    lse[i, h] += np.log(total[h])


@njit(**_OPTIONS)
def backward_rows_kernel(bounds, rowptr, col, q, k, v, dy, y, lse, scale, dq, delta):
    """The row (CSR) pass of backward: delta[i, h] = <dy_i, y_i> and dq.

    p_ij = exp(scale <q_i, k_j> - lse_i), ds_ij = p_ij (<dy_i, v_j> - delta_i),
    dq_i = scale * sum_j ds_ij k_j.
    """
    heads, dim = q.shape[1], q.shape[2]
    k_flat, v_flat = k.reshape(-1), v.reshape(-1)
    for b in prange(bounds.size - 1):
        block_end = rowptr[bounds[b + 1]]
        for i in range(bounds[b], bounds[b + 1]):
            dq[i] = 0
            for h in range(heads):
                delta[i, h] = _dot(dy, i, y, i, h)
            for e in range(rowptr[i], rowptr[i + 1]):
                if e + AHEAD < block_end:
                    prefetch_row(k_flat, col[e + AHEAD], heads * dim)
                    prefetch_row(v_flat, col[e + AHEAD], heads * dim)
                j = col[e]
                for h in range(heads):
                    p = np.exp(scale * _dot(q, i, k, j, h) - lse[i, h])
                    ds = p * (_dot(dy, i, v, j, h) - delta[i, h])
                    for d in range(dim):
                        dq[i, h, d] += ds * k[j, h, d]
            dq[i] *= scale


@njit(**_OPTIONS)
def backward_cols_kernel(bounds, colptr, row, q, k, v, dy, lse, delta, scale, dk, dv):
    """The column (CSC) pass of backward: for each source j, over the rows i that attend to it,
    dv_j = sum_i p_ij dy_i and dk_j = scale * sum_i ds_ij q_i (p, ds as in the row pass)."""
    heads, dim = k.shape[1], k.shape[2]
    q_flat, dy_flat = q.reshape(-1), dy.reshape(-1)
    for b in prange(bounds.size - 1):
        block_end = colptr[bounds[b + 1]]
        for j in range(bounds[b], bounds[b + 1]):
            dk[j] = 0
            dv[j] = 0
            for e in range(colptr[j], colptr[j + 1]):
                if e + AHEAD < block_end:
                    prefetch_row(q_flat, row[e + AHEAD], heads * dim)
                    prefetch_row(dy_flat, row[e + AHEAD], heads * dim)
                i = row[e]
                for h in range(heads):
                    p = np.exp(scale * _dot(q, i, k, j, h) - lse[i, h])
                    ds = p * (_dot(dy, i, v, j, h) - delta[i, h])
                    for d in range(dim):
                        dv[j, h, d] += p * dy[i, h, d]
                        dk[j, h, d] += ds * q[i, h, d]
            dk[j] *= scale


def balanced_bounds(ptr: np.ndarray, num_blocks: int) -> np.ndarray:
    """Splits segments 0..n-1 (ptr int64 [n+1]) into at most ``num_blocks`` runs of consecutive
    segments with about equal cost (edges + segments); returns the run boundaries, int64 [B+1]."""
    n = ptr.size - 1
    cost = ptr + np.arange(n + 1, dtype=np.int64)  # prefix cost: edges plus one per segment
    targets = np.linspace(0, cost[-1], num_blocks + 1)
    bounds = np.searchsorted(cost, targets, side="left").astype(np.int64)
    bounds[0], bounds[-1] = 0, n
    return np.unique(bounds)
