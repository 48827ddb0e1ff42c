"""The CUDA backend against the pure-torch reference on a GPU (run by tools/gpu/check.sh).

Every kernel is covered: the R-MAT graph with a hub has rows with no edges (small bin), rows of
tens to hundreds of edges (small and warp bins) and a 20,000-edge row and a 6,000-edge column
(long bins, several chunks merged), for the forward, dQ and dK/dV passes, every head dim, fp32 and
bf16. The degree edge-case graph (tests/ops/cases.py) adds what that graph misses: sources with
1..16 out-edges (the small-column backward bin) and with none, rows and columns of exactly 4096,
4097 and 8193 edges (a full last chunk, and last chunks of one edge with empty warps), rows of
16/17 and 1024/1025 edges (bin boundaries). Also: no edges, no rows, int64 col, only some of q, k,
v requiring grad, bf16 non-contiguous and misaligned inputs, bf16 determinism; edge values
(the probabilities recomputed in torch around the kernels) against the reference, in bounded memory.

The backend is called through the public ``dsgraph.ops.sparse_attention(..., backend="cuda")``.
"""

from __future__ import annotations

import pytest
import torch

from dsgraph.ops import available_backends, sparse_attention, sparse_attention_reference
from tests.ops import cases
from tests.ops.cases import N_SRC, TOLERANCE, assert_relative_close, qkv, rmat_with_hub, run, run_reference_fp32

HEAD_DIMS = (8, 16, 32, 64, 128)  # the CUDA kernels' head dims (docs/concepts/kernels.md)
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif("cuda" not in available_backends(), reason="needs CuPy and a CUDA GPU"),
]
cuda_attention = cases.public("cuda")


@pytest.fixture(scope="module")
def graph():
    rowptr, col = rmat_with_hub()
    return rowptr.cuda(), col.cuda()


@DTYPES
@pytest.mark.parametrize("dim", HEAD_DIMS)
@pytest.mark.parametrize("heads", [1, 4, 8])
def test_matches_reference(graph, heads, dim, dtype):
    rowptr, col = graph
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, heads, dim, dtype, device="cuda")
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to("cuda", dtype)
    got = run(cuda_attention, rowptr, col, q, k, v, dy)
    want = run_reference_fp32(sparse_attention_reference, rowptr, col, q, k, v, dy)
    for name, a, b in zip(("y", "dq", "dk", "dv"), got, want):
        assert a.dtype == dtype and a.shape == b.shape, name
        assert_relative_close(a, b.to(dtype), TOLERANCE[dtype])
    empty_rows = (rowptr[1:] == rowptr[:-1]).nonzero().squeeze(1)
    assert bool((got[0][empty_rows] == 0).all())


@DTYPES
@pytest.mark.parametrize("dim", [8, 32, 128])
@pytest.mark.parametrize("heads", [1, 4])
def test_degree_edge_cases(heads, dim, dtype):
    cases.check_degree_edge_cases("cuda", heads, dim, dtype, "cuda")


@DTYPES
@pytest.mark.parametrize("check", cases.EDGE_CASE_CHECKS, ids=cases.check_name)
def test_edge_case(check, dtype):
    """Empty graphs, int64 col, partial requires_grad, strided/misaligned inputs, bit-identical backward."""
    check("cuda", dtype, "cuda")


def test_non_contiguous_inputs_and_side_stream(graph):
    rowptr, col = graph
    n_dst, heads, dim = rowptr.numel() - 1, 4, 32
    gen = torch.Generator().manual_seed(3)
    q_base = torch.randn(n_dst, 3, heads, dim, generator=gen).cuda().requires_grad_()
    kv_base = torch.randn(heads, N_SRC, 2, dim, generator=gen).cuda().requires_grad_()
    q, k, v = q_base[:, 1], kv_base[:, :, 0].transpose(0, 1), kv_base[:, :, 1].transpose(0, 1)
    dy = torch.randn(n_dst, dim, heads, generator=gen).cuda().transpose(1, 2)

    def grads(fn):
        y = fn(rowptr, col, q, k, v, dim**-0.5)
        return (y, *torch.autograd.grad(y, (q_base, kv_base), dy))

    want = grads(sparse_attention_reference)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the kernels must run on torch's current stream
        got = grads(cuda_attention)
    torch.cuda.current_stream().wait_stream(side)
    for a, b in zip(got, want):
        assert_relative_close(a, b, 1e-5)


def test_backward_is_bit_identical(graph):
    rowptr, col = graph
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, 8, 16, device="cuda")
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(2)).cuda()
    first = run(cuda_attention, rowptr, col, q, k, v, dy)
    second = run(cuda_attention, rowptr, col, q, k, v, dy)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def _peak_extra_bytes(fn) -> int:
    """Peak CUDA memory allocated by torch during fn() above the level before it."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def _uniform_graph(n: int, edges: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """rowptr, col (int32) on the GPU: ``edges`` random sources over ``n`` rows cut at random."""
    col = torch.randint(0, n, (edges,), generator=gen, dtype=torch.int32).cuda()
    rowptr = torch.zeros(n + 1, dtype=torch.int64)
    rowptr[1:] = torch.sort(torch.randint(0, edges + 1, (n,), generator=gen)).values
    rowptr[-1] = edges
    return rowptr.cuda(), col


def test_no_edge_sized_activation():
    n, heads, dim, edges = 4_000, 8, 32, 1_000_000
    gen = torch.Generator().manual_seed(0)
    rowptr, col = _uniform_graph(n, edges, gen)
    q, k, v = qkv(n, n, heads, dim, device="cuda")
    dy = torch.randn(q.shape, generator=gen).cuda()
    edge_tensor_bytes = edges * heads * dim * 4
    run(cuda_attention, rowptr, col, q, k, v, dy)  # compile, build and cache plans and the transpose
    fused = _peak_extra_bytes(lambda: run(cuda_attention, rowptr, col, q, k, v, dy))
    reference = _peak_extra_bytes(lambda: run(sparse_attention_reference, rowptr, col, q, k, v, dy))
    assert fused < 0.25 * edge_tensor_bytes, (fused, edge_tensor_bytes)
    assert reference > edge_tensor_bytes, (reference, edge_tensor_bytes)


@DTYPES
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_edge_values_match_reference(graph, dtype, with_bias):
    """model.edge_features 'bias_value': the kernels keep only lse, and the probabilities are
    recomputed in torch around them (dsgraph/ops/edge_values.py)."""
    rowptr, col = graph
    cases.check_edge_values("cuda", rowptr, col, N_SRC, 4, 32, dtype, "cuda", with_bias=with_bias)


def test_edge_values_make_no_edge_by_head_dim_tensor():
    """The recomputed probabilities and their gradients go in edge chunks (edge_values.CHUNK_BYTES):
    no E x H x D tensor in forward or backward, only E x H ones."""
    n, heads, dim, edges = 4_000, 8, 32, 1_000_000
    gen = torch.Generator().manual_seed(0)
    rowptr, col = _uniform_graph(n, edges, gen)
    u = torch.randn(edges, 3, generator=gen).cuda()
    q, k, v = qkv(n, n, heads, dim, device="cuda")
    dy, dz = torch.randn(q.shape, generator=gen).cuda(), torch.randn(n, heads, 3, generator=gen).cuda()

    def run_with_edge_values():
        y, z = sparse_attention(rowptr, col, q, k, v, edge_values=u, backend="cuda")
        torch.autograd.grad((y, z), (q, k, v), (dy, dz))

    run_with_edge_values()  # compile, build and cache plans and the transpose
    assert _peak_extra_bytes(run_with_edge_values) < 0.5 * edges * heads * dim * 4


def test_unsupported_head_dim_is_a_value_error(graph):
    rowptr, col = graph
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, 2, 24, device="cuda")
    with pytest.raises(ValueError, match="head dim 24"):
        cuda_attention(rowptr, col, q, k, v, 1.0)


@DTYPES
def test_small_case_for_the_sanitizer(dtype):
    """Every kernel (each bin, chunk merges, the small-column backward) once on small inputs: the
    case tools/gpu/check.sh runs under compute-sanitizer memcheck and racecheck (``-k sanitizer``)."""
    cases.check_degree_edge_cases("cuda", 1, 32, dtype, "cuda")
    rowptr, col = rmat_with_hub()
    rowptr, col = rowptr.cuda(), col.cuda()
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, 2, 16, dtype, device="cuda")
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to("cuda", dtype)
    got = run(cuda_attention, rowptr, col, q, k, v, dy)
    want = run_reference_fp32(sparse_attention_reference, rowptr, col, q, k, v, dy)
    for a, b in zip(got, want):
        assert_relative_close(a, b.to(dtype), TOLERANCE[dtype])
