"""How the CPU backend hands torch tensors to its numba kernels: thread counts, work blocks and
numpy views (in huge pages where the kernels gather at random)."""

from __future__ import annotations

import numba
import numpy as np
import torch

from dsgraph.ops.cpu import huge_pages
from dsgraph.ops.csc import cached_per_graph

BLOCKS_PER_THREAD = 16  # work blocks per thread: enough to even out power-law rows
MIN_WORK_PER_THREAD = 1 << 17  # (edge, head) pairs: below this, another thread costs more than it saves


def set_threads(work: int) -> None:
    """numba threads: torch's thread count, fewer for small graphs (work = edges x heads).

    The first call starts numba's OpenMP pool, which sets the process-wide OpenMP thread count to
    the pool's size (all cores); torch reads that same setting, so its thread count is put back.
    Otherwise a rank set to 1 thread would run everything on all cores from then on, and ranks that
    share the cores would slow each other several-fold."""
    threads = torch.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS, work // MIN_WORK_PER_THREAD)))
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def bounds(rowptr, col, ptr: np.ndarray, which: str) -> np.ndarray:
    """Work blocks over the segments of ``ptr`` (rows or columns of the graph), cached per graph."""
    blocks = BLOCKS_PER_THREAD * numba.get_num_threads()
    key = ("cpu-bounds", which, ptr.size, blocks)
    return cached_per_graph(rowptr, col, key, lambda: work_blocks(ptr, blocks))


def work_blocks(ptr: np.ndarray, num_blocks: int) -> np.ndarray:
    """Splits segments 0..n-1 (ptr int64 [n+1]) into at most ``num_blocks`` runs of consecutive
    segments with about equal cost (edges + segments); returns the run boundaries, int64 [B+1]."""
    n = ptr.size - 1
    cost = ptr + np.arange(n + 1, dtype=np.int64)  # prefix cost: edges plus one per segment
    targets = np.linspace(0, cost[-1], num_blocks + 1)
    found = np.searchsorted(cost, targets, side="left").astype(np.int64)
    found[0], found[-1] = 0, n
    return np.unique(found)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def compute_tensor(t: torch.Tensor, cdt: torch.dtype) -> torch.Tensor:
    """``t`` C-contiguous in ``cdt``: itself, or (for bf16 or strided inputs) an N x H x D copy."""
    return t.detach().to(cdt).contiguous()


def as_compute_array(t: torch.Tensor, cdt: torch.dtype) -> np.ndarray:
    """A C-contiguous numpy view of ``compute_tensor(t, cdt)``."""
    return compute_tensor(t, cdt).numpy()


def gather_source(t: torch.Tensor, cdt: torch.dtype) -> np.ndarray:
    """``as_compute_array`` for an array the kernels gather rows from at random: the view itself
    where its tensor is small or in torch's huge pages, else a huge-page copy (``huge_pages.py``)."""
    t = compute_tensor(t, cdt)
    if t.nbytes < huge_pages.MIN_BYTES or huge_pages.in_huge_pages(t):
        return t.numpy()
    return huge_pages.copy(t.numpy())


def as_int32(col: torch.Tensor) -> torch.Tensor:
    return col if col.dtype == torch.int32 else col.to(torch.int32)
