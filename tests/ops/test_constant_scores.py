"""Constant scores (``sparse_attention(rowptr, col, None, None, v)``, ``dsgraph/ops/mean.py``): every
backend and the torch sparse-matmul path (what CUDA runs) against the reference oracle (the
attention's own softmax with every score 0) and against an explicit mean, in fp32 (1e-5) and bf16
(2e-2), forward and dv, on rows of in-degree 0, 1 and > 4096 and a long CSC column; blocks of
sources merged as the ring strategy merges them; fp64 gradcheck of the CPU kernels."""

import pytest
import torch

from dsgraph.ops import attention_backward, attention_forward, get_backend, merge, sparse_attention
from dsgraph.ops.backend import FusedBackend
from dsgraph.ops.dispatch import available_backends
from dsgraph.ops.mean import MeanAggregation, torch_mean_backward, torch_mean_forward
from dsgraph.ops.reference import sparse_attention_reference
from tests.ops.cases import TOLERANCE, assert_relative_close, rmat_with_hub, source_blocks

N_SRC = 512
CPU_BACKENDS = [n for n in available_backends() if get_backend(n).device_type in (None, "cpu")]


@pytest.fixture(scope="module")
def graph():
    """R-MAT rows (some without edges), a hub row of 20,000 in-edges, 6,000 rows of two in-edges
    (source 0's column is long), and a row of exactly one in-edge."""
    rowptr, col = rmat_with_hub()
    rowptr = torch.cat([rowptr, rowptr[-1:] + 1])
    col = torch.cat([col, torch.tensor([3], dtype=col.dtype)])
    degrees = rowptr.diff()
    assert (degrees == 0).any() and (degrees == 1).any() and int(degrees.max()) > 4096
    return rowptr, col


def _explicit_mean(rowptr, col, v64) -> torch.Tensor:
    """y_i = mean of v_j over row i's in-edges, 0 without edges, in fp64 (a dense matrix of 1/d_i)."""
    n = rowptr.numel() - 1
    dst = torch.repeat_interleave(torch.arange(n), rowptr.diff())
    a = torch.zeros(n, v64.shape[0], dtype=torch.float64).index_put_(
        (dst, col.long()), torch.ones(col.numel(), dtype=torch.float64), True
    )
    return torch.einsum("ij,jhd->ihd", a / rowptr.diff().clamp_min(1).double()[:, None], v64)


def _values(n, dtype, seed=1):
    return torch.randn(n, 4, 16, generator=torch.Generator().manual_seed(seed)).to(dtype).requires_grad_()


class TorchMean(FusedBackend):
    """The base class's constant scores (torch's sparse matmul: the CUDA backend's path) on the CPU."""

    name = "torch-mean"

    def forward(self, *args, **kwargs):
        raise AssertionError("constant scores must not run the attention's forward")

    def backward(self, *args, **kwargs):
        raise AssertionError("constant scores must not run the attention's backward")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("path", [*CPU_BACKENDS, "torch-mean"])
def test_mean_matches_the_oracle(graph, path, dtype):
    rowptr, col = graph
    v = _values(N_SRC, dtype)
    dy = torch.randn((rowptr.numel() - 1, 4, 16), generator=torch.Generator().manual_seed(2)).to(dtype)
    if path == "torch-mean":
        y = MeanAggregation.apply(TorchMean(), rowptr, col, v)
    else:
        y = sparse_attention(rowptr, col, None, None, v, backend=path)
    (dv,) = torch.autograd.grad(y, v, dy)
    v32 = v.detach().float().requires_grad_()  # the oracle in fp32: its bf16 sums round in bf16
    y_ref = sparse_attention_reference(rowptr, col, None, None, v32, 1.0)
    (dv_ref,) = torch.autograd.grad(y_ref, v32, dy.float())
    assert y.dtype == dtype and dv.dtype == dtype
    assert_relative_close(y, y_ref, TOLERANCE[dtype])
    assert_relative_close(dv, dv_ref, TOLERANCE[dtype])
    assert_relative_close(y_ref, _explicit_mean(rowptr, col, v.detach().double()), 1e-6)
    empty = rowptr.diff() == 0
    assert float(y[empty].abs().max()) == 0.0  # rows without in-edges aggregate nothing


def test_oracle_is_the_attention_with_equal_scores(graph):
    """q = k = None is the attention whose scores are all equal (q = 0 makes every score 0)."""
    rowptr, col = graph
    v = _values(N_SRC, torch.float64)
    zeros_q, zeros_k = torch.zeros(rowptr.numel() - 1, 4, 16, dtype=torch.float64), torch.zeros_like(v)
    assert_relative_close(
        sparse_attention_reference(rowptr, col, None, None, v, 1.0),
        sparse_attention_reference(rowptr, col, zeros_q, zeros_k, v, 1.0),
        1e-12,
    )


def test_cpu_kernels_gradcheck():
    rowptr = torch.tensor([0, 0, 1, 4, 6, 6, 9])
    col = torch.tensor([2, 0, 1, 2, 3, 3, 4, 0, 1], dtype=torch.int32)
    v = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: sparse_attention(rowptr, col, None, None, v, backend="cpu"), (v,))


def test_torch_path_matches_the_cpu_kernels(graph):
    """Forward and backward of the torch sparse matmul (CUDA's) and of the CPU kernels, with lse."""
    rowptr, col = graph
    v = _values(N_SRC, torch.float32).detach()
    cpu = get_backend("cpu")
    y, lse = torch_mean_forward(rowptr, col, v)
    y_cpu, lse_cpu = cpu.mean_forward(rowptr, col, v)
    assert_relative_close(y_cpu, y, 1e-5)
    assert torch.equal(lse_cpu, lse) and torch.equal(lse[:, 0], torch.log(rowptr.diff().float()))
    dy = torch.randn(y.shape)
    assert_relative_close(cpu.mean_backward(rowptr, col, dy, N_SRC), torch_mean_backward(rowptr, col, dy, N_SRC), 1e-5)


@pytest.mark.parametrize("name", [n for n in CPU_BACKENDS if isinstance(get_backend(n), FusedBackend)])
def test_source_blocks_merge_into_the_whole_mean(graph, name):
    """attention_forward/backward with q = k = None over two blocks of sources, merged by their
    log-sum-exp and given the whole (y, lse), give the whole mean and dv (as ``ag_ring`` runs them)."""
    rowptr, col = graph
    v = _values(N_SRC, torch.float32)
    dy = torch.randn((rowptr.numel() - 1, 4, 16), generator=torch.Generator().manual_seed(3))
    y_ref = sparse_attention_reference(rowptr, col, None, None, v, 1.0)
    (dv_ref,) = torch.autograd.grad(y_ref, v, dy)
    half = N_SRC // 3
    parts = [block[:4] for block in source_blocks(rowptr, col, ((0, half), (half, N_SRC)))]
    blocks = [attention_forward(r, c, None, None, v[lo:hi], backend=name) for r, c, lo, hi in parts]
    y, lse = merge(blocks[0], blocks[1])
    assert_relative_close(y, y_ref.detach(), 1e-5)
    dv = torch.zeros_like(v)
    for (r, c, lo, hi), block in zip(parts, blocks):
        dq_b, dk_b, dv[lo:hi] = attention_backward(r, c, None, None, v[lo:hi], block, dy, whole=(y, lse), backend=name)
        assert dq_b is None and dk_b is None
    assert_relative_close(dv, dv_ref, 1e-5)


def test_constant_scores_say_what_they_do_not_take(graph):
    rowptr, col = graph
    v = _values(N_SRC, torch.float32)
    q = torch.zeros(rowptr.numel() - 1, 4, 16)
    with pytest.raises(ValueError, match="q = k = None \\(both\\)"):
        sparse_attention(rowptr, col, q, None, v)
    with pytest.raises(ValueError, match="take no score bias or edge values"):
        sparse_attention(rowptr, col, None, None, v, bias=torch.zeros(col.numel(), 4))
    with pytest.raises(ValueError, match="v must be 3-D"):
        sparse_attention(rowptr, col, None, None, v[:, 0])
