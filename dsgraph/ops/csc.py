"""Per-graph cached structures for the fused backends, above all the transpose (CSC) of the graph.

The backward pass for dK and dV walks the graph by *source* node, so the fused backends need the
transpose of the destination-sorted CSR. It is built once per graph and cached: the cache entry
belongs to the (rowptr, col) tensor objects, is dropped when either of them is freed, and is rebuilt
if either is modified in place (torch bumps a tensor's version counter on every in-place write).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch

T = TypeVar("T")

# (id(rowptr), id(col), what) -> (versions and pointers the entry was built from, value)
_CACHE: dict[tuple, tuple[tuple, object]] = {}


def _fingerprint(rowptr: torch.Tensor, col: torch.Tensor) -> tuple:
    return (
        rowptr._version,
        col._version,
        rowptr.data_ptr(),
        col.data_ptr(),
        tuple(rowptr.shape),
        tuple(col.shape),
        col.dtype,
        rowptr.device,
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
    perm: [E], the CSR position of each CSC edge (CSC edge e is CSR edge perm[e]): int32 on the CPU
    below 2^31 edges (half the bytes; the numba kernels take either), else int64 (the CUDA kernels).
    """

    colptr: torch.Tensor
    row: torch.Tensor
    perm: torch.Tensor


SORT_CHUNK_EDGES = 2**30  # torch.argsort on CUDA refuses more than 2^31 - 1 elements


def build_transpose(
    rowptr: torch.Tensor, col: torch.Tensor, n_src: int, chunk_edges: int = SORT_CHUNK_EDGES
) -> Transpose:
    """Builds the CSC of a CSR graph (uncached); see :func:`transpose`.

    A stable counting sort by source, done in chunks of at most ``chunk_edges`` consecutive CSR
    edges, so that no sort, bincount or search sees more than that many elements (any edge count
    works on any device). Chunk c's edges of source j go after those of chunks 0..c-1: chunks follow
    the destination order, so destinations stay ascending within every source, as one stable sort
    of the whole ``col`` would leave them."""
    device, edges = col.device, col.numel()
    bounds = list(range(0, edges, chunk_edges)) + [edges]
    counts = torch.zeros(n_src, dtype=torch.int64, device=device)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        counts += torch.bincount(col[lo:hi].long(), minlength=n_src)
    colptr = torch.zeros(n_src + 1, dtype=torch.int64, device=device)
    torch.cumsum(counts, 0, out=colptr[1:])
    narrow = device.type == "cpu" and edges <= torch.iinfo(torch.int32).max
    perm = torch.empty(edges, dtype=torch.int32 if narrow else torch.int64, device=device)
    row = torch.empty(edges, dtype=torch.int32, device=device)
    filled = colptr[:-1].clone()  # [N_src] next free CSC position of every source
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        src = col[lo:hi].long()
        order = torch.argsort(src, stable=True)  # chunk-local, destinations ascending per source
        src_sorted = src[order]
        chunk_counts = torch.bincount(src, minlength=n_src)
        chunk_start = torch.cumsum(chunk_counts, 0) - chunk_counts  # [N_src] first sorted slot of each source
        position = filled[src_sorted] + torch.arange(hi - lo, device=device) - chunk_start[src_sorted]
        edge = order + lo
        perm[position] = edge.to(perm.dtype)
        row[position] = (torch.searchsorted(rowptr, edge, right=True) - 1).to(torch.int32)
        filled += chunk_counts
    return Transpose(colptr=colptr, row=row, perm=perm)


def transpose(rowptr: torch.Tensor, col: torch.Tensor, n_src: int) -> Transpose:
    """The cached CSC of the CSR graph (rowptr int64 [N_dst+1], col [E] with ids in [0, n_src))."""
    return cached_per_graph(rowptr, col, ("csc", n_src), lambda: build_transpose(rowptr, col, n_src))


def csc_slots(rowptr: torch.Tensor, col: torch.Tensor, n_src: int) -> torch.Tensor:
    """[E]: the CSC position of every CSR edge (CSR edge e is CSC edge slots[e]; the inverse of
    ``transpose(...).perm``), cached per graph like the transpose; int32 below 2^31 edges (half
    the memory), else int64. The CPU backward reads the ds it wrote in CSC order through it."""

    def build() -> torch.Tensor:
        perm = transpose(rowptr, col, n_src).perm
        dtype = torch.int32 if perm.numel() <= torch.iinfo(torch.int32).max else torch.int64
        slots = torch.empty(perm.numel(), dtype=dtype, device=perm.device)
        slots[perm] = torch.arange(perm.numel(), dtype=dtype, device=perm.device)
        return slots

    return cached_per_graph(rowptr, col, ("csc-slots", n_src), build)
