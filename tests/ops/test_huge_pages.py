"""dsgraph/ops/huge_pages.py: the arrays the CPU kernels gather from, in transparent huge pages."""

import numpy as np

from dsgraph.ops import huge_pages


def test_large_arrays_start_on_a_huge_page_and_small_ones_are_plain():
    big = huge_pages.empty((huge_pages.MIN_BYTES // 4 + 3,), np.float32)
    assert big.ctypes.data % huge_pages.HUGE_PAGE_BYTES == 0 and big.flags.c_contiguous and big.flags.writeable
    big[:] = 1.5
    assert float(big.sum()) == 1.5 * big.size
    small = huge_pages.empty((4, 3), np.float64)
    assert small.shape == (4, 3) and small.dtype == np.float64


def test_interleave_and_copy_keep_the_values():
    rng = np.random.default_rng(0)
    k, v = (rng.standard_normal((huge_pages.MIN_BYTES // 64, 2, 8)).astype(np.float32) for _ in range(2))
    kv = huge_pages.interleave(k, v)
    assert kv.shape == (k.shape[0], 2, 2, 8) and kv.flags.c_contiguous
    assert np.array_equal(kv[:, 0], k) and np.array_equal(kv[:, 1], v)
    strided = kv[:, 1]
    copied = huge_pages.copy(strided)
    assert copied.flags.c_contiguous and np.array_equal(copied, v)
    small = huge_pages.interleave(k[:3], v[:3])  # below MIN_BYTES: numpy's copy, not numba's threads
    assert np.array_equal(small[:, 0], k[:3]) and np.array_equal(small[:, 1], v[:3])
