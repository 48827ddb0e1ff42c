"""Arrays in transparent huge pages, for the rows the CPU kernels gather at random.

A gather of one H x D row per edge from an array of 100 MB or more touches a new 4 KiB page almost
every time, so with ordinary pages nearly every row costs a TLB miss and a page walk on top of its
cache misses. Backed by 2 MiB pages, the same array needs 512x fewer TLB entries. Linux gives them
to anonymous memory marked ``MADV_HUGEPAGE`` when transparent huge pages are 'always' or 'madvise'
(/sys/kernel/mm/transparent_hugepage/enabled); elsewhere ``empty`` is plain ``np.empty``.
"""

from __future__ import annotations

import mmap

import numpy as np
from numba import njit, prange

HUGE_PAGE_BYTES = 2 << 20
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


@njit(parallel=True, cache=True)
def _interleave_rows(out, arrays):
    """out[n, t] = arrays[t][n] on 2-D views ([N, T*W] and T arrays [N, W]), in parallel over rows."""
    rows, width = out.shape[0], arrays[0].shape[1]
    step = -(-rows // COPY_BLOCKS)
    for block in prange(COPY_BLOCKS):
        for n in range(block * step, min(rows, (block + 1) * step)):
            for t in range(len(arrays)):
                out[n, t * width : (t + 1) * width] = arrays[t][n]


def interleave(*arrays: np.ndarray) -> np.ndarray:
    """[N, len(arrays), ...]: row n holds arrays[0][n], arrays[1][n], ... side by side (one
    contiguous block per row, so a gather reads one span); in huge pages (see ``empty``). Copied
    by numba's threads (numpy's single-threaded strided copy took 3x as long on 1 GiB)."""
    first = arrays[0]
    out = empty((first.shape[0], len(arrays)) + first.shape[1:], first.dtype)
    if out.nbytes < MIN_BYTES:  # starting the threads would take longer than the copy
        for t, a in enumerate(arrays):
            out[:, t] = a
        return out
    flat = tuple(np.ascontiguousarray(a, first.dtype).reshape(first.shape[0], -1) for a in arrays)
    _interleave_rows(out.reshape(first.shape[0], -1), flat)
    return out


def copy(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``array`` in huge pages (see ``empty``)."""
    return interleave(array).reshape(array.shape)
