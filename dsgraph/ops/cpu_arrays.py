"""What the fused CPU kernels' wrappers share: thread counts, work blocks and numpy views.

``cpu.py`` (log-sum-exp kernels, the separate-pass API) and ``cpu_probs.py`` (the kernels that keep
the probabilities, the one-call autograd path) both hand torch tensors to numba this way.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from dsgraph.ops import cpu_kernels, huge_pages
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
    return cached_per_graph(rowptr, col, key, lambda: cpu_kernels.balanced_bounds(ptr, blocks))


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
