"""numba kernels of the fused CPU backend that keep the attention probabilities (E x H) for backward.

``cpu_kernels.py`` keeps only the log-sum-exp and recomputes both dot products of every edge-head
in each of the two backward passes. These kernels keep what DGL keeps instead, the probabilities
p [E, H] (fp32, CSR edge order; never an E x H x D tensor), so that:

- forward reads k_j in a first sweep over the row's edges (scores into p, running max per head),
  then v_j in a second (p = exp(score - max), sum, accumulate), then normalises p in place;
  every k_j and v_j is read once per edge and every exp is taken once, with no rescaling (the
  first sweep also prefetches v_j of the row's first edges, which the second sweep needs at once);
- the row pass of backward reads p, computes dp_ij = <dy_i, v_j> (its only dot product) and
  ds_ij = p_ij (dp_ij - delta_i), accumulates dq and writes ds [E, H];
- the column pass reads p and ds of each CSC edge through the transpose's permutation and only
  accumulates: dv_j = sum_i p_ij dy_i, dk_j = scale * sum_i ds_ij q_i (no dot product, no exp).

They are valid only with the p of the same attention call: the separate-pass API (a y and lse
merged over several source blocks) runs the recomputing kernels of ``cpu_kernels.py``.

Arrays are C-contiguous, float32 or float64: q, y [N_dst, H, D]; k, v [N_src, H, D]; kv [N_src, 2, H, D]
and qdy [N_dst, 2, H, D] (k_j and v_j, q_i and dy_i side by side: one gathered span per edge); p, ds [E, H];
lse [N_dst, H]; rowptr/colptr int64; col/row int32; perm int64 (CSC position -> CSR position).
The vector arithmetic is ``cpu_simd``'s, on flat indices (row i, head h starts at (i*H + h)*D).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from dsgraph.ops.cpu_prefetch import prefetch_span
from dsgraph.ops.cpu_simd import add, exp_diff, head_axpy, head_dots, maximum, mul, softmax_grad
from dsgraph.ops.cpu_simd import scale as scale_into

_OPTIONS = dict(parallel=True, cache=True, error_model="numpy")
AHEAD = 8  # edges: prefetch the gathered rows of the edge this far ahead (forward, dq pass)
AHEAD_COLUMNS = 16  # the same for the column pass (measured on rmat:18, see cpu_probs.py)


@njit(inline="always")
def _row_scores(q, i, kv, col, start, end, block_end, scale, p, row_max):
    """p[e, h] = scale * <q_ih, k_jh> for the row's edges (j = col[e]); row_max [H] their maximum."""
    heads, dim = q.shape[1], q.shape[2]
    width = heads * dim
    row_max[:] = -np.inf
    for e in range(start, min(end, start + AHEAD)):  # v of the first edges: _row_values needs them first
        prefetch_span(kv, (col[e] * 2 + 1) * width, width)
    for e in range(start, end):
        if e + AHEAD < block_end:
            prefetch_span(kv, col[e + AHEAD] * 2 * width, width)
        head_dots(p, e * heads, q, i * width, kv, col[e] * 2 * width, heads, dim, scale)
        maximum(row_max, 0, p, e * heads, heads)


@njit(inline="always")
def _row_values(kv, col, start, end, p, row_max, total, acc):
    """p[e] = exp(p[e] - row_max) for the row's edges, total [H] their sum and acc [H*D] the
    p-weighted sum of v_j."""
    heads, dim = kv.shape[2], kv.shape[3]
    width = heads * dim
    total[:] = 0
    acc[:] = 0
    for e in range(start, end):
        if e + AHEAD < end:
            prefetch_span(kv, (col[e + AHEAD] * 2 + 1) * width, width)
        exp_diff(p, e * heads, row_max, 0, heads)
        add(total, 0, p, e * heads, heads)
        head_axpy(acc, 0, p, e * heads, kv, (col[e] * 2 + 1) * width, heads, dim)


@njit(**_OPTIONS)
def forward_probs_kernel(bounds, rowptr, col, q, kv, scale, y, lse, p):
    """y, lse and the probabilities p of every row (see the module doc); kv [N_src, 2, H, D] holds
    k_j and v_j side by side. Rows without edges give y = 0 and lse = -inf."""
    heads, dim = q.shape[1], q.shape[2]
    for b in prange(bounds.size - 1):
        row_max, total, acc = np.empty(heads, q.dtype), np.empty(heads, q.dtype), np.empty(heads * dim, q.dtype)
        block_end = rowptr[bounds[b + 1]]
        for i in range(bounds[b], bounds[b + 1]):
            start, end = rowptr[i], rowptr[i + 1]
            if start == end:
                y[i] = 0
                lse[i] = -np.inf
                continue
            _row_scores(q, i, kv, col, start, end, block_end, scale, p, row_max)
            _row_values(kv, col, start, end, p, row_max, total, acc)
            for h in range(heads):
                lse[i, h] = row_max[h] + np.log(total[h])
                total[h] = 1 / total[h]
                scale_into(y, (i * heads + h) * dim, total[h], acc, h * dim, dim)
            for e in range(start, end):
                mul(p, e * heads, total, 0, heads)


@njit(**_OPTIONS)
def row_deltas_kernel(bounds, dy, y, delta):
    """delta[i, h] = <dy_ih, y_ih> (bounds: blocks of consecutive rows)."""
    heads, dim = y.shape[1], y.shape[2]
    width = heads * dim
    for b in prange(bounds.size - 1):
        for i in range(bounds[b], bounds[b + 1]):
            head_dots(delta, i * heads, dy, i * width, y, i * width, heads, dim, 1.0)


@njit(inline="always")
def _prefetch_column_edge(qdy, p, ds, delta, row, perm, e):
    """The gathered rows of CSC edge e: q_i and dy_i (one span), delta_i, and p and ds of its CSR slot."""
    heads, dim = qdy.shape[2], qdy.shape[3]
    i, c = row[e], perm[e]
    prefetch_span(qdy, i * 2 * heads * dim, 2 * heads * dim)
    prefetch_span(delta, i * heads, heads)
    prefetch_span(p, c * heads, heads)
    prefetch_span(ds, c * heads, heads)


@njit(**_OPTIONS)
def backward_cols_probs_kernel(bounds, colptr, row, perm, qdy, v, p, delta, scale, dk, dv, ds):
    """The column (CSC) pass: for each source j and each row i that attends to it (CSR slot c),
    ds[c] = p[c] * (<dy_i, v_j> - delta_i) per head, dv_j = sum_i p[c] dy_i and
    dk_j = scale * sum_i ds[c] q_i. qdy [N_dst, 2, H, D] holds q_i and dy_i side by side."""
    heads, dim = qdy.shape[2], qdy.shape[3]
    width = heads * dim
    for b in prange(bounds.size - 1):
        dp, dk_acc, dv_acc = np.empty(heads, qdy.dtype), np.empty(width, qdy.dtype), np.empty(width, qdy.dtype)
        block_end = colptr[bounds[b + 1]]
        for j in range(bounds[b], bounds[b + 1]):
            dk_acc[:] = 0
            dv_acc[:] = 0
            for e in range(colptr[j], colptr[j + 1]):
                if e + AHEAD_COLUMNS < block_end:
                    _prefetch_column_edge(qdy, p, ds, delta, row, perm, e + AHEAD_COLUMNS)
                i, c = row[e], perm[e]
                head_dots(dp, 0, qdy, (2 * i + 1) * width, v, j * width, heads, dim, 1.0)
                softmax_grad(ds, c * heads, p, c * heads, dp, 0, delta, i * heads, heads)
                head_axpy(dv_acc, 0, p, c * heads, qdy, (2 * i + 1) * width, heads, dim)
                head_axpy(dk_acc, 0, ds, c * heads, qdy, 2 * i * width, heads, dim)
            scale_into(dk, j * width, scale, dk_acc, 0, width)
            scale_into(dv, j * width, 1.0, dv_acc, 0, width)


@njit(**_OPTIONS)
def backward_rows_probs_kernel(bounds, rowptr, col, k, ds, scale, dq):
    """The row (CSR) pass: dq_i = scale * sum_j ds_ij k_j (ds from the column pass)."""
    heads, dim = k.shape[1], k.shape[2]
    width = heads * dim
    for b in prange(bounds.size - 1):
        acc = np.empty(width, k.dtype)
        block_end = rowptr[bounds[b + 1]]
        for i in range(bounds[b], bounds[b + 1]):
            acc[:] = 0
            for e in range(rowptr[i], rowptr[i + 1]):
                if e + AHEAD < block_end:
                    prefetch_span(k, col[e + AHEAD] * width, width)
                head_axpy(acc, 0, ds, e * heads, k, col[e] * width, heads, dim)
            scale_into(dq, i * width, scale, acc, 0, width)
