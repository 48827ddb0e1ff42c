"""numba kernel of the fused CPU forward: y, the log-sum-exp and, when kept, the attention
probabilities p [E, H].

It reads k_j in a first sweep over the row's edges (scores, running max per head), then v_j in a
second (p = exp(score - max), sum, accumulate): every k_j and v_j is read once per edge and every
exp is taken once, with no rescaling (the first sweep also prefetches v_j of the row's first edges,
which the second sweep needs at once). The scores go to p [E, H] (fp32, CSR edge order), normalised
in place, when the caller keeps p for backward (``keep_p``: edge values, or
``ops.cpu.KEEP_PROBABILITIES``); otherwise to a work array of the block's largest row, so the
forward writes no E x H array (4 bytes an edge-head: at rmat:19 in one process, 272 MB of the
forward's peak). k and v are gathered where they are: the sweeps read them
separately, so a copy of the two side by side saves nothing but costs 2 x N x H x D of fresh
memory per call. It also writes lse [N_dst, H] = max + log(sum) (-inf for rows without edges),
which backward recomputes p from and callers that merge partial results over blocks of sources
need (``dispatch.merge``).
With a score bias (``has_bias``) the first sweep adds bias[e, h] to each score as it writes it: the
bias is read once per edge-head, in CSR order, beside the p it lands in.

Arrays are C-contiguous, float32 or float64: q, y [N_dst, H, D]; k, v [N_src, H, D]; p flat [E * H]
(empty without ``keep_p``); bias [E, H] ([0, H] without one); lse [N_dst, H]; rowptr int64; col int32.
The vector arithmetic is ``simd``'s, on flat indices (row i, head h starts at (i*H + h)*D).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from dsgraph.ops.cpu.prefetch import prefetch_span
from dsgraph.ops.cpu.simd import add, exp_diff, head_axpy, head_dots, maximum, mul
from dsgraph.ops.cpu.simd import scale as scale_into

_OPTIONS = dict(parallel=True, cache=True, error_model="numpy")
AHEAD = 8  # edges: prefetch the gathered rows of the edge this far ahead


@njit(inline="always")
def _row_scores(q, i, k, v, col, start, end, block_end, scale, bias, has_bias, p, base, row_max):
    """p[e - base, h] = scale * <q_ih, k_jh> (+ bias[e, h]) for the row's edges (j = col[e]); row_max
    [H] their maximum."""
    heads, dim = q.shape[1], q.shape[2]
    width = heads * dim
    row_max[:] = -np.inf
    for e in range(start, min(end, start + AHEAD)):  # v of the first edges: _row_values needs them first
        prefetch_span(v, col[e] * width, width)
    for e in range(start, end):
        if e + AHEAD < block_end:
            prefetch_span(k, col[e + AHEAD] * width, width)
        at = (e - base) * heads
        head_dots(p, at, q, i * width, k, col[e] * width, heads, dim, scale)
        if has_bias:
            add(p, at, bias, e * heads, heads)
        maximum(row_max, 0, p, at, heads)


@njit(inline="always")
def _row_values(v, col, start, end, p, base, row_max, total, acc):
    """p[e - base] = exp(p[e - base] - row_max) for the row's edges, total [H] their sum and acc
    [H*D] the p-weighted sum of v_j."""
    heads, dim = v.shape[1], v.shape[2]
    width = heads * dim
    total[:] = 0
    acc[:] = 0
    for e in range(start, end):
        if e + AHEAD < end:
            prefetch_span(v, col[e + AHEAD] * width, width)
        at = (e - base) * heads
        exp_diff(p, at, row_max, 0, heads)
        add(total, 0, p, at, heads)
        head_axpy(acc, 0, p, at, v, col[e] * width, heads, dim)


@njit(**_OPTIONS)
def forward_kernel(bounds, rowptr, col, q, k, v, scale, bias, has_bias, y, p, keep_p, lse):
    """y, lse and, if ``keep_p``, the probabilities p of every row (see the module doc). Without
    ``keep_p`` (p empty) a row's scores go to a work array of the block's largest row instead, so
    no E x H array is written. Rows without edges give y = 0 and lse = -inf."""
    heads, dim = q.shape[1], q.shape[2]
    for b in prange(bounds.size - 1):
        row_max, total, acc = np.empty(heads, q.dtype), np.empty(heads, q.dtype), np.empty(heads * dim, q.dtype)
        widest = 0
        if not keep_p:
            for i in range(bounds[b], bounds[b + 1]):
                widest = max(widest, rowptr[i + 1] - rowptr[i])
        scores = p if keep_p else np.empty(widest * heads, q.dtype)
        block_end = rowptr[bounds[b + 1]]
        for i in range(bounds[b], bounds[b + 1]):
            start, end = rowptr[i], rowptr[i + 1]
            if start == end:
                y[i] = 0
                lse[i] = -np.inf
                continue
            base = 0 if keep_p else start
            _row_scores(q, i, k, v, col, start, end, block_end, scale, bias, has_bias, scores, base, row_max)
            _row_values(v, col, start, end, scores, base, row_max, total, acc)
            for h in range(heads):
                lse[i, h] = row_max[h] + np.log(total[h])
                total[h] = 1 / total[h]
                scale_into(y, (i * heads + h) * dim, total[h], acc, h * dim, dim)
            if keep_p:
                for e in range(start, end):
                    mul(p, e * heads, total, 0, heads)
