"""numba kernels of the fused CPU backward, which reads the forward's probabilities p [E, H] or
recomputes each from the forward's lse (``keep_p``).

Per edge (i, j) and head h, with p_ij the forward's probability and delta_i = <dy_i, y_i>:
dp_ij = <dy_i, v_j>, ds_ij = p_ij (dp_ij - delta_i); then dk_j = scale * sum_i ds_ij q_i and
dv_j = sum_i p_ij dy_i (column sums) and dq_i = scale * sum_j ds_ij k_j (a row sum). Three passes,
one thread per output row or column, a fixed order of additions, no atomics:

- ``row_deltas_kernel``: delta [N_dst, H];
- ``backward_columns_kernel`` (CSC order): per in-edge of column j, gathers q_i, dy_i and delta_i
  where they are and p_ij from the forward's p (its CSR slot, ``Transpose.perm``), forms ds_ij
  (v_j is the column's own, so dp costs no gather) and writes it in CSC order, ds [E, H];
- ``backward_rows_kernel`` (CSR order): dq_i from ds (each edge's CSC slot, ``csc.csc_slots``)
  and k_j gathered where it is; a bf16 backward keeps ds as bfloat16 bits (``_store_ds`` rounds
  them; ``ops.cpu.DS_IN_BF16``), which the row pass widens.

With a score bias, the column pass also writes each ds_ij to dbias at the edge's CSR slot (the
bias's gradient, once per edge-head); p already holds the bias's effect, so backward never reads it.
With edge values (``ops/edge_values.py``) it adds dp_extra[e, h] (CSR slot) to each dp_ij; their
share of delta is added to delta before the pass.

So backward gathers q_i and dy_i (1 KiB an edge at H=8, D=16, fp32), then k_j (512 B), where the
forward gathers k_j and v_j (1 KiB); p and ds are read at random, one cache line an edge. The
earlier kernels gathered k_j and v_j in a row pass and recomputed p from a packed copy
[q_i | dy_i | lse_i | delta_i] in the column pass: 2 KiB an edge and N x (2HD + 2H) floats of
fresh memory per call (rmat:18, H=8, D=16, alternating processes: backward 235-257 ms against
188-194 ms for these, forward 123-131 ms).
Reading p instead of recomputing it saves a dot product and an exp per edge-head (column pass
117 against 137 ms on rmat:18), but keeping p costs 4 bytes an edge-head per layer for the whole
backward, so by default the column pass recomputes it (``ops.cpu.KEEP_PROBABILITIES``). The
random reads are cheap only in huge pages (``huge_pages.py``; the row pass read ds from 4 KiB
pages in 108 ms, from huge pages in 50 ms), so ds and every output come from torch's allocator.

Arrays are C-contiguous float32 or float64: q, dy, y, dq [N_dst, H, D]; delta [N_dst, H]; k, v, dk,
dv [N_src, H, D]; p and ds flat [E * H] (p in CSR, ds in CSC edge order); rowptr/colptr and perm
int64; slots int32 (int64 from 2^31 edges); col/row int32. Flat indices as in ``simd``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from dsgraph.ops.cpu.prefetch import prefetch_span
from dsgraph.ops.cpu.simd import add, exp_diff, head_axpy, head_dots, softmax_grad
from dsgraph.ops.cpu.simd import scale as scale_into

_OPTIONS = dict(parallel=True, cache=True, error_model="numpy")
COLUMN_AHEAD = 8  # edges: prefetch what the column pass gathers (18 cache lines an edge at H=8, D=16) this far ahead
ROW_AHEAD = 16  # the row pass gathers 9 lines an edge: about as many lines in flight (rmat:18: 8 and 16 best)


@njit(**_OPTIONS)
def row_deltas_kernel(bounds, dy, y, delta):
    """delta[i, h] = <dy_ih, y_ih> (bounds: row blocks)."""
    heads, dim = dy.shape[1], dy.shape[2]
    for b in prange(bounds.size - 1):
        for i in range(bounds[b], bounds[b + 1]):
            head_dots(delta, i * heads, dy, i * heads * dim, y, i * heads * dim, heads, dim, 1.0)


@njit(inline="always")
def _prefetch_edge(q, dy, delta, p, lse, row, perm, ahead, block_end, heads, width, need_kv, keep_p):
    """Prefetches what the column pass gathers for CSC edge ``ahead`` (none past ``block_end``)."""
    if ahead >= block_end:
        return
    i, slot = row[ahead], perm[ahead]
    if need_kv or not keep_p:
        prefetch_span(q, i * width, width)
    prefetch_span(dy, i * width, width)
    prefetch_span(delta, i * heads, heads)
    if keep_p:
        prefetch_span(p, slot * heads, heads)
    else:
        prefetch_span(lse, i * heads, heads)


@njit(inline="always")
def _edge_probabilities(p, at, keep_p, q, i, k, j, lse, bias, has_bias, scale, heads, dim, buffer):
    """(array, offset) of p_ij's H values: the forward's p at the edge's CSR slot ``at`` when kept,
    else recomputed into ``buffer`` as exp(scale <q_i, k_j> (+ bias) - lse_i) (k's row j)."""
    if keep_p:
        return p, at
    head_dots(buffer, 0, q, i * heads * dim, k, j * heads * dim, heads, dim, scale)
    if has_bias:
        add(buffer, 0, bias, at, heads)
    exp_diff(buffer, 0, lse, i * heads, heads)
    return buffer, 0


@njit(inline="always")
def _store_ds(ds, at, values, heads):
    """ds[at : at + heads] = values: as they are into a float array, or rounded to bfloat16 (to
    nearest, ties to even; NaN stays NaN) into a uint16 array of bfloat16 bits."""
    if ds.itemsize == 2:
        bits = values.view(np.uint32)
        for h in range(heads):
            b = bits[h]
            if (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
                ds[at + h] = np.uint16((b >> np.uint32(16)) | np.uint32(0x40))
            else:
                ds[at + h] = np.uint16((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    else:
        for h in range(heads):
            ds[at + h] = values[h]


@njit(**_OPTIONS)
def backward_columns_kernel(
    bounds,
    colptr,
    row,
    perm,
    q,
    dy,
    delta,
    k,
    v,
    p,
    scale,
    dk,
    dv,
    ds,
    keep_ds,
    need_kv,
    dbias,
    need_bias,
    dp_extra,
    has_extra,
    first,
    recompute,
):
    """ds in CSC order (if keep_ds), in CSR order into dbias (flat [E * H], if need_bias) and, if
    need_kv, dk_j = scale * sum_i ds_ij q_i and dv_j = sum_i p_ij dy_i over the rows i of column j
    (bounds: column blocks). k, v, dk, dv hold the columns from ``first`` on (row j - first).
    ``recompute`` (keep_p, lse, bias, has_bias): p_ij is p's (keep_p) or exp(q.k + bias - lse)."""
    keep_p, lse, bias, has_bias = recompute
    heads, dim = v.shape[1], v.shape[2]
    width = heads * dim
    for b in prange(bounds.size - 1):
        local = np.empty(heads, v.dtype)  # ds of the edge at hand
        recomputed = np.empty(heads, v.dtype)  # p of the edge at hand when p is not kept
        dk_acc, dv_acc = np.empty(width, v.dtype), np.empty(width, v.dtype)
        block_end = colptr[bounds[b + 1]]
        for j in range(bounds[b], bounds[b + 1]):
            dk_acc[:], dv_acc[:] = 0, 0
            for e in range(colptr[j], colptr[j + 1]):
                _prefetch_edge(
                    q, dy, delta, p, lse, row, perm, e + COLUMN_AHEAD, block_end, heads, width, need_kv, keep_p
                )
                i, at = row[e], perm[e] * heads
                probs, pat = _edge_probabilities(
                    p, at, keep_p, q, i, k, j - first, lse, bias, has_bias, scale, heads, dim, recomputed
                )
                head_dots(local, 0, dy, i * width, v, (j - first) * width, heads, dim, 1.0)
                if has_extra:
                    add(local, 0, dp_extra, at, heads)
                softmax_grad(local, 0, probs, pat, local, 0, delta, i * heads, heads)
                if keep_ds:
                    _store_ds(ds, e * heads, local, heads)
                if need_bias:
                    scale_into(dbias, at, 1.0, local, 0, heads)
                if need_kv:
                    head_axpy(dv_acc, 0, probs, pat, dy, i * width, heads, dim)
                    head_axpy(dk_acc, 0, local, 0, q, i * width, heads, dim)
            if need_kv:
                scale_into(dk, (j - first) * width, scale, dk_acc, 0, width)
                scale_into(dv, (j - first) * width, 1.0, dv_acc, 0, width)


@njit(**_OPTIONS)
def backward_rows_kernel(bounds, rowptr, col, slots, k, ds, scale, dq, first):
    """dq_i = scale * sum_j ds_ij k_j over the edges of row i, ds_ij at CSC slot slots[e]
    (bounds: row blocks), into dq's row i - first (dq holds the rows from ``first`` on). ds is
    float, or bfloat16 bits (uint16) widened to fp32 per edge. Rows without edges get dq = 0."""
    heads, dim = k.shape[1], k.shape[2]
    width = heads * dim
    for b in prange(bounds.size - 1):
        acc, w = np.empty(width, k.dtype), np.empty(heads, k.dtype)  # w: ds of the edge at hand
        bits = w.view(np.uint32)  # used for bfloat16 ds only (k is then fp32)
        block_end = rowptr[bounds[b + 1]]
        for i in range(bounds[b], bounds[b + 1]):
            acc[:] = 0
            for e in range(rowptr[i], rowptr[i + 1]):
                if e + ROW_AHEAD < block_end:
                    prefetch_span(k, col[e + ROW_AHEAD] * width, width)
                    prefetch_span(ds, slots[e + ROW_AHEAD] * heads, heads)
                at = slots[e] * heads
                for h in range(heads):
                    if ds.itemsize == 2:
                        bits[h] = np.uint32(ds[at + h]) << np.uint32(16)
                    else:
                        w[h] = ds[at + h]
                head_axpy(acc, 0, w, 0, k, col[e] * width, heads, dim)
            scale_into(dq, (i - first) * width, scale, acc, 0, width)
