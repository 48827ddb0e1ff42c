"""numba kernels of the edge values' two row sums on the CPU backend (``ops/edge_values.py``).

For per-edge values u [E, C] in CSR order and the forward's probabilities p [E, H]:

- ``value_sum_kernel``: z[i, h, c] = sum over row i's edges e of p[e, h] u[e, c] (forward);
- ``value_grad_kernel``: g[e, h] = sum_c dz[i, h, c] u[e, c] for every edge e of row i (what z adds
  to each score's upstream gradient in backward).

One thread per block of rows (``arrays.bounds``), the edges of a row in CSR order: a fixed order of
additions, no atomics, deterministic. Both read p, u and g sequentially and dz once per row, so
each is one streaming pass over E x (H + C) values, instead of C index_add / index_select passes
of E x H in torch. Arrays are C-contiguous float32 or float64.
"""

from __future__ import annotations

from numba import njit, prange

_OPTIONS = dict(parallel=True, cache=True, error_model="numpy")


@njit(**_OPTIONS)
def value_sum_kernel(bounds, rowptr, p, u, z):
    """z [N, H, C] = per row, sum_e p[e, h] u[e, c] (z is written whole; rows without edges get 0)."""
    heads, channels = p.shape[1], u.shape[1]
    for b in prange(bounds.size - 1):
        for i in range(bounds[b], bounds[b + 1]):
            for h in range(heads):
                for c in range(channels):
                    z[i, h, c] = 0.0
            for e in range(rowptr[i], rowptr[i + 1]):
                for h in range(heads):
                    weight = p[e, h]
                    for c in range(channels):
                        z[i, h, c] += weight * u[e, c]


@njit(**_OPTIONS)
def value_grad_kernel(bounds, rowptr, dz, u, g):
    """g [E, H] = per edge e of row i, sum_c dz[i, h, c] u[e, c]."""
    heads, channels = dz.shape[1], u.shape[1]
    for b in prange(bounds.size - 1):
        for i in range(bounds[b], bounds[b + 1]):
            for e in range(rowptr[i], rowptr[i + 1]):
                for h in range(heads):
                    total = 0.0
                    for c in range(channels):
                        total += dz[i, h, c] * u[e, c]
                    g[e, h] = total
