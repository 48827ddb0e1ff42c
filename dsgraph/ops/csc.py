"""Per-graph cached structures for the fused backends, above all the transpose (CSC) of the graph.

The backward pass for dK and dV walks the graph by *source* node, so the fused backends need the
transpose of the destination-sorted CSR. It is built once per graph and cached: the cache entry
belongs to the (rowptr, col) tensor objects, is dropped when either of them is freed, and is rebuilt
if either is modified in place (torch bumps a tensor's version counter on every in-place write).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable, TypeVar

import torch

T = TypeVar("T")

# (id(rowptr), id(col), what) -> (versions and pointers the entry was built from, value)
_CACHE: dict[tuple, tuple[tuple, object]] = {}


def _fingerprint(rowptr: torch.Tensor, col: torch.Tensor) -> tuple:
    return (
        rowptr._version, col._version, rowptr.data_ptr(), col.data_ptr(),
        tuple(rowptr.shape), tuple(col.shape), col.dtype, rowptr.device,
    )


def cached_per_graph(rowptr: torch.Tensor, col: torch.Tensor, what: tuple, build: Callable[[], T]) -> T:
    """Returns ``build()``, computed once per (graph tensors, ``what``) and cached.

    ``what`` names the structure and anything it depends on besides the graph (for example the
    number of source nodes). The entry dies with the tensors; an in-place change rebuilds it.
    """
    key = (id(rowptr), id(col), what)
    stamp = _fingerprint(rowptr, col)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]  # type: ignore[return-value]
    value = build()
    if hit is None:  # first entry for these objects: drop it when either of them is freed
        weakref.finalize(rowptr, _CACHE.pop, key, None)
        weakref.finalize(col, _CACHE.pop, key, None)
    _CACHE[key] = (stamp, value)
    return value


@dataclass(frozen=True)
class Transpose:
    """The graph sorted by source node (CSC), on the graph's device.

    colptr: int64 [N_src+1]; edges of source j are positions colptr[j]:colptr[j+1].
    row: int32 [E], the destination node of each edge in CSC order (ascending within a source).
    perm: int64 [E], the CSR position of each CSC edge (CSC edge e is CSR edge perm[e]).
    """

    colptr: torch.Tensor
    row: torch.Tensor
    perm: torch.Tensor


def build_transpose(rowptr: torch.Tensor, col: torch.Tensor, n_src: int) -> Transpose:
    """Builds the CSC of a CSR graph (uncached); see :func:`transpose`."""
    n_dst = rowptr.numel() - 1
    device = col.device
    perm = torch.argsort(col, stable=True)  # stable: destinations stay ascending within a source
    dst = torch.repeat_interleave(torch.arange(n_dst, device=device, dtype=torch.int32), rowptr[1:] - rowptr[:-1])
    counts = torch.bincount(col.long(), minlength=n_src) if col.numel() else torch.zeros(n_src, dtype=torch.int64, device=device)
    colptr = torch.zeros(n_src + 1, dtype=torch.int64, device=device)
    torch.cumsum(counts, 0, out=colptr[1:])
    return Transpose(colptr=colptr, row=dst[perm], perm=perm)


def transpose(rowptr: torch.Tensor, col: torch.Tensor, n_src: int) -> Transpose:
    """The cached CSC of the CSR graph (rowptr int64 [N_dst+1], col [E] with ids in [0, n_src))."""
    return cached_per_graph(rowptr, col, ("csc", n_src), lambda: build_transpose(rowptr, col, n_src))
