"""dsgraph/ops/cpu/huge_pages.py: the arrays the CPU kernels gather from, in transparent huge pages."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from dsgraph.graph.rmat import rmat_graph
from dsgraph.ops import sparse_attention
from dsgraph.ops.cpu import huge_pages
from dsgraph.ops.cpu.arrays import gather_source


def test_large_arrays_start_on_a_huge_page_and_small_ones_are_plain():
    big = huge_pages.empty((huge_pages.MIN_BYTES // 4 + 3,), np.float32)
    assert big.ctypes.data % huge_pages.HUGE_PAGE_BYTES == 0 and big.flags.c_contiguous and big.flags.writeable
    big[:] = 1.5
    assert float(big.sum()) == 1.5 * big.size
    small = huge_pages.empty((4, 3), np.float64)
    assert small.shape == (4, 3) and small.dtype == np.float64


def test_copy_keeps_the_values():
    rng = np.random.default_rng(0)
    big = rng.standard_normal((huge_pages.MIN_BYTES // 64 + 5, 2, 8)).astype(np.float32)
    copied = huge_pages.copy(big)
    assert (
        copied.flags.c_contiguous
        and copied.ctypes.data % huge_pages.HUGE_PAGE_BYTES == 0
        and np.array_equal(copied, big)
    )
    assert np.array_equal(huge_pages.copy(big[:3]), big[:3])  # below MIN_BYTES: numpy's copy, not numba's threads


@pytest.mark.slow
def test_import_dsgraph_asks_torch_for_huge_pages_and_keeps_a_users_choice():
    probe = (
        "import dsgraph, torch; from dsgraph.ops.cpu import huge_pages; print(huge_pages.torch_allocates_huge_pages())"
    )
    for setting, expected in ((None, "True"), ("0", "False")):
        env = {"PATH": "/usr/bin:/bin"} | ({} if setting is None else {huge_pages.TORCH_SWITCH: setting})
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
        assert out.strip() == expected, (setting, out)


def test_gather_source_copies_only_what_is_not_in_huge_pages():
    big = torch.randn(huge_pages.MIN_BYTES // 4)
    assert huge_pages.in_huge_pages(big) == huge_pages.torch_allocates_huge_pages()
    from_numpy = torch.from_numpy(np.random.default_rng(0).standard_normal(big.numel() + 1).astype(np.float32)[1:])
    assert not huge_pages.in_huge_pages(from_numpy)  # numpy's buffer, one element in: not torch's page-aligned block
    source = gather_source(from_numpy, torch.float32)
    assert source.ctypes.data != from_numpy.data_ptr() and np.array_equal(source, from_numpy.numpy())
    if huge_pages.in_huge_pages(big):
        assert gather_source(big, torch.float32).ctypes.data == big.data_ptr()  # gathered in place


def test_the_op_gives_the_same_bits_from_huge_page_copies_and_in_place():
    """Inputs large enough for gather_source: in place (torch's blocks) or copied (numpy's), the
    kernels read the same values in the same order."""
    g = rmat_graph("rmat:12", seed=0)
    n = g.num_nodes
    gen = torch.Generator().manual_seed(0)
    tensors = [torch.randn(n, 8, 64, generator=gen) for _ in range(4)]  # 8 MiB each at n = 4096
    assert tensors[0].nbytes >= huge_pages.MIN_BYTES

    def run(q, k, v, dy):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))  # the same storage
        y = sparse_attention(g.rowptr, g.col, q, k, v, backend="cpu")
        y.backward(dy)
        return y.detach(), q.grad, k.grad, v.grad

    # numpy's buffers, 16 floats in: never page-aligned, so gather_source copies them
    numpy_backed = [
        torch.from_numpy(np.concatenate([np.zeros(16, np.float32), t.numpy().reshape(-1)])[16:].reshape(t.shape))
        for t in tensors
    ]
    assert not any(huge_pages.in_huge_pages(t) for t in numpy_backed)
    for a, b in zip(run(*tensors), run(*numpy_backed)):
        assert torch.equal(a, b)
