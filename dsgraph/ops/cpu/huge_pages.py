"""Transparent huge pages for the rows the CPU kernels gather at random.

A gather of one H x D row per edge from an array of 100 MB or more touches a new 4 KiB page almost
every time, so with ordinary pages nearly every row costs a TLB miss and a page walk on top of its
cache misses. Backed by 2 MiB pages, the same array needs 512x fewer TLB entries (rmat:20, H=8,
D=16: the fused forward took 915 ms gathering from 4 KiB pages, 551 ms from huge pages). Linux
gives them to anonymous memory marked ``MADV_HUGEPAGE`` when transparent huge pages are 'always'
or 'madvise' (/sys/kernel/mm/transparent_hugepage/enabled).

torch's CPU allocator marks its blocks of 2 MiB or more so, aligned to a page, when
``THP_MEM_ALLOC_ENABLE=1`` at its first such block; ``import dsgraph`` sets that unless the user
set it (``TORCH_SWITCH``). Then the kernels gather k and v where they are, and
``arrays.gather_source`` copies only a tensor from elsewhere (a numpy buffer, or one
allocated before dsgraph was imported). The same setting makes most first writes cheaper: a
fresh 1 GiB tensor faults in as 512 huge pages instead of 262,144 small ones (here 45-55 ms
against 225-255 ms; on this VM, memory that sat free for seconds is taken back by the host, and
then 300-400 ms).
"""

from __future__ import annotations

import functools
import mmap

import numpy as np
import torch
from numba import njit, prange

# read by torch's CPU allocator; set by ``import dsgraph``; re-exported for the tests and tools/benchmarks
from dsgraph import TORCH_THP_SWITCH as TORCH_SWITCH  # noqa: F401

HUGE_PAGE_BYTES = 2 << 20
PAGE_BYTES = mmap.PAGESIZE
MIN_BYTES = 4 * HUGE_PAGE_BYTES  # smaller arrays fit the TLB anyway
COPY_BLOCKS = 64  # parallel copies: blocks of rows, a few per thread


def empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised C-contiguous array, in huge pages where the system offers them; the
    memory is returned when the array (and every view of it) is freed."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    nbytes = count * dtype.itemsize
    advise = getattr(mmap, "MADV_HUGEPAGE", None)
    if nbytes < MIN_BYTES or advise is None:
        return np.empty(shape, dtype)
    buf = mmap.mmap(-1, nbytes + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        buf.madvise(advise)
    except OSError:  # a kernel without transparent huge pages: ordinary pages
        pass
    start = -np.frombuffer(buf, np.uint8, count=1).ctypes.data % HUGE_PAGE_BYTES  # first 2 MiB boundary
    return np.frombuffer(buf, dtype, count=count, offset=start).reshape(shape)


@functools.cache
def torch_allocates_huge_pages() -> bool:
    """Whether torch's CPU allocator puts its large blocks in huge pages in this process: it then
    aligns them to a page (seen in torch 2.13 and 2.2), where glibc's mapped blocks start just
    past one (its header; 64 bytes with torch's usual alignment)."""
    probe = torch.empty(HUGE_PAGE_BYTES, dtype=torch.uint8)
    return probe.data_ptr() % PAGE_BYTES == 0


def in_huge_pages(t: torch.Tensor) -> bool:
    """Whether the CPU tensor ``t`` lies in a block that torch's allocator put in huge pages (a
    block below glibc's mmap threshold may pass by chance, 1 in 64: then rows are gathered from
    small pages, slower but the same)."""
    storage = t.untyped_storage()
    return storage.data_ptr() % PAGE_BYTES == 0 and storage.nbytes() >= HUGE_PAGE_BYTES and torch_allocates_huge_pages()


@njit(parallel=True, cache=True)
def _copy_blocks(out, src):
    """out[:] = src on flat views, in COPY_BLOCKS parallel blocks."""
    step = -(-src.size // COPY_BLOCKS)
    for block in prange(COPY_BLOCKS):
        out[block * step : min(src.size, (block + 1) * step)] = src[block * step : min(src.size, (block + 1) * step)]


def copy(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of the C-contiguous ``array`` in huge pages (see ``empty``), copied by
    numba's threads (numpy's copy is single-threaded)."""
    out = empty(array.shape, array.dtype)
    if out.nbytes < MIN_BYTES:  # starting the threads would take longer than the copy
        out[...] = array
    else:
        _copy_blocks(out.reshape(-1), np.ascontiguousarray(array).reshape(-1))
    return out
