"""numba kernel of the random-walk estimator of RWSE (``rwse.py``).

For every origin u the kernel runs ``walks`` random walks of ``steps`` steps along out-edges, all
walks of one origin in lockstep (their memory reads are independent, so the CPU overlaps their
cache misses). It does not count returns; it adds, at every step k, the probability that the next
step returns to u from where the walk stands: P[v, u] = (edges v -> u) / outdeg(v), looked up in
u's sorted in-neighbour list. That is the conditional expectation of the return indicator
(Rao-Blackwell), so the estimate stays unbiased with a smaller variance, and step 1 is exact. A
walk that reaches a node without out-edges stops (P has a zero row there, as in the exact
definition). Random numbers are a counter-based hash of (seed, node key, step, walk): the result
does not depend on the thread count or on which other nodes are computed.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
NODES_PER_TASK = 64  # origins per parallel task (each task allocates its walk positions once)


@njit(inline="always")
def _mix(z):
    """splitmix64's output function: a well-mixed 64-bit hash of z."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(inline="always")
def _edges_from(in_ptr, in_col, u, v):
    """How many edges v -> u there are: occurrences of v in u's sorted in-neighbour list."""
    lo, hi = in_ptr[u], in_ptr[u + 1]
    end = hi
    while lo < hi:
        mid = (lo + hi) >> 1
        if in_col[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    count = 0
    while lo < end and in_col[lo] == v:
        count += 1
        lo += 1
    return count


@njit(parallel=True, cache=True)
def estimate_returns(out_ptr, out_col, in_ptr, in_col, node_keys, first, last, steps, walks, seed, out):
    """out[u - first, k] = the estimate of (P^(k+1))[u, u] for origins u in [first, last), float64."""
    num_tasks = (last - first + NODES_PER_TASK - 1) // NODES_PER_TASK
    for task in prange(num_tasks):
        position = np.empty(walks, dtype=np.int64)
        for u in range(first + task * NODES_PER_TASK, min(last, first + (task + 1) * NODES_PER_TASK)):
            if out_ptr[u + 1] == out_ptr[u]:
                continue  # no out-edges: every return probability is 0
            base = _mix(np.uint64(seed) * GOLDEN + np.uint64(node_keys[u]))
            position[:] = u
            for k in range(steps):
                total = 0.0
                for w in range(walks):
                    v = position[w]
                    if v < 0:
                        continue
                    start = out_ptr[v]
                    degree = out_ptr[v + 1] - start
                    if degree == 0:
                        position[w] = -1
                        continue
                    total += _edges_from(in_ptr, in_col, u, v) / degree
                    if k + 1 == steps:
                        continue  # the last step's position is never read
                    r = _mix(base + np.uint64(k * walks + w + 1) * GOLDEN)
                    position[w] = np.int64(out_col[start + np.int64((r >> np.uint64(11)) % np.uint64(degree))])
                out[u - first, k] = total / walks
