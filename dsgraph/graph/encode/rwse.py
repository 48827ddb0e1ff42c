"""RWSE: the return probabilities of random walks, (P^k)[u, u] for k = 1..K (Dwivedi et al., ICLR
2022; GraphGPS's and PyG's ``AddRandomWalkPE``), with P = D_out^-1 A the transition matrix of a walk
along the dataset's edges (a node without out-edges has a zero row, so its walks stop).

Two ways to compute it:

- ``exact``: column blocks of P^k, one block of ``BLOCK`` origins at a time: Y <- P Y starting from
  the origins' unit vectors, K sparse-dense products per block, reading the diagonal. Work is
  K * E * N multiply-adds (memory N * BLOCK), so it is for graphs up to about 10^4-10^5 nodes.
- ``walks``: the Monte-Carlo estimator of ``walk_kernel.py``: W walks per node, each step adding the
  probability of returning from where the walk stands (unbiased; step 1 exact). Work is
  N * W * K steps, memory the two neighbour lists. Its error is measured against ``exact``
  (docs/benchmarks/2026-12-03-encodings.md): the standard error of one entry is at most
  1 / (2 sqrt(W)) and in practice far smaller, since the added probabilities, not 0/1 outcomes,
  vary from walk to walk.

``method='auto'`` takes ``exact`` while K * E * N <= ``max_exact_work``, else ``walks``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dsgraph.graph.encode.adjacency import Adjacency

METHODS = ("auto", "exact", "walks")
MAX_EXACT_WORK = 1e11  # multiply-adds: about 40 s of exact RWSE (2.4e9 per second measured on rmat:14, one core)
DEFAULT_WALKS = 256
BLOCK = 256  # origins per exact block: Y is N x BLOCK float64
SLICE_NODES = 1 << 14  # origins per estimator call: the progress bar's step


def choose_method(adj: Adjacency, steps: int, method: str = "auto", max_exact_work: float = MAX_EXACT_WORK) -> str:
    """'exact' or 'walks': ``method`` itself, or for 'auto' exact while K * E * N fits the budget."""
    if method not in METHODS:
        raise ValueError(f"RWSE method must be one of {', '.join(METHODS)}; got {method!r}")
    if method != "auto":
        return method
    return "exact" if float(steps) * adj.num_edges * adj.num_nodes <= max_exact_work else "walks"


def transition_matrix(adj: Adjacency) -> sp.csr_matrix:
    """P = D_out^-1 A, float64 CSR (row u: u's out-edges, each 1 / outdeg(u); duplicates add up)."""
    degree = np.diff(adj.out_ptr)
    data = np.repeat(1.0 / np.maximum(degree, 1), degree)
    return sp.csr_matrix((data, adj.out_col, adj.out_ptr), shape=(adj.num_nodes, adj.num_nodes))


def exact_rwse(adj: Adjacency, steps: int, progress=None) -> np.ndarray:
    """float32 [N, K]: (P^k)[u, u], k = 1..K, by propagating blocks of unit vectors."""
    n = adj.num_nodes
    p = transition_matrix(adj)
    out = np.zeros((n, steps), dtype=np.float32)
    for lo in range(0, n, BLOCK):
        hi = min(n, lo + BLOCK)
        cols = np.arange(hi - lo)
        y = np.zeros((n, hi - lo))
        y[lo + cols, cols] = 1.0
        for k in range(steps):
            y = p @ y
            out[lo:hi, k] = y[lo + cols, cols]
        if progress is not None:
            progress(hi - lo)
    return out


def walk_rwse(adj: Adjacency, steps: int, walks: int = DEFAULT_WALKS, seed: int = 0, progress=None) -> np.ndarray:
    """float32 [N, K]: the random-walk estimate of (P^k)[u, u] (``walk_kernel.py``)."""
    from dsgraph.graph.encode.walk_kernel import estimate_returns  # numba compiles on first use

    if walks < 1:
        raise ValueError(f"RWSE needs at least one walk per node, got {walks}")
    n = adj.num_nodes
    out = np.zeros((n, steps), dtype=np.float32)
    buffer = np.zeros((min(n, SLICE_NODES), steps), dtype=np.float64)
    for lo in range(0, n, SLICE_NODES):
        hi = min(n, lo + SLICE_NODES)
        buffer[:] = 0.0
        estimate_returns(
            adj.out_ptr, adj.out_col, adj.in_ptr, adj.in_col, adj.node_keys, lo, hi, steps, walks, seed, buffer
        )
        out[lo:hi] = buffer[: hi - lo]
        if progress is not None:
            progress(hi - lo)
    return out


def rwse(
    adj: Adjacency,
    steps: int,
    *,
    method: str = "auto",
    walks: int = DEFAULT_WALKS,
    seed: int = 0,
    max_exact_work: float = MAX_EXACT_WORK,
    progress=None,
) -> tuple[np.ndarray, str]:
    """(float32 [N, K] return probabilities for k = 1..``steps``, the method used).
    ``progress(nodes)`` is called as origins are done."""
    if steps < 1:
        raise ValueError(f"RWSE needs K >= 1 walk lengths, got {steps}")
    chosen = choose_method(adj, steps, method, max_exact_work)
    if chosen == "exact":
        return exact_rwse(adj, steps, progress), chosen
    return walk_rwse(adj, steps, walks, seed, progress), chosen
