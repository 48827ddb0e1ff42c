"""The op's edge values (``dsgraph/ops/edge_values.py``): with u [E, C] it also returns
z_i = sum_j a_ij u_ij, from which the model builds TransformerConv's edge-conditioned value. The
reference is checked against a per-row softmax written out. Both paths of a fused backend are
checked against the reference (y, z and the gradients of q, k, v and bias for a loss that reads
both) on a power-law graph with rows of degree 0, 1 and more than 4096, in fp32 and bf16, with and
without a score bias: the CPU kernels' own (``keeps_probabilities``), and the recomputed path the
CUDA backend takes, run here through the CPU kernels with their probabilities hidden
(``LseOnlyCpuBackend``), so CI runs the exact torch code that wraps the CUDA kernels (the kernels
themselves with edge values: tests/ops/test_cuda_emulated.py and, on a GPU, test_cuda_gpu.py).
gradcheck in fp64: test_score_bias.py. The separate passes (``ops/blocks.py``, for ``ag_ring``)
over blocks of sources, merged, give the whole op's y, z and gradients on both paths."""

from __future__ import annotations

import pytest
import torch

from dsgraph.ops import attention_backward, attention_forward, edge_values, merge, register_backend, sparse_attention
from dsgraph.ops.backend import Backend, FusedBackend
from dsgraph.ops.cpu import CpuBackend
from dsgraph.ops.cuda import CudaBackend
from dsgraph.ops.dispatch import unregister_backend
from dsgraph.ops.reference import sparse_attention_reference
from tests.ops.cases import (
    N_SRC,
    TOLERANCE,
    assert_relative_close,
    check_edge_values,
    degree_edge_cases,
    qkv,
    rmat_with_hub,
    score_bias,
    source_blocks,
)

HEADS, DIM = 4, 16
LSE_ONLY = "cpu-lse-only"


class LseOnlyCpuBackend(CpuBackend):
    """The CPU kernels as a backend that, like the CUDA one, hands over no probabilities and takes no
    extra score gradient: edge values must take the recomputed path (never picked by 'auto')."""

    name, priority, keeps_probabilities = LSE_ONLY, -100, False
    value_sum, value_grad = FusedBackend.value_sum, FusedBackend.value_grad  # torch's, as the CUDA backend's

    def probabilities(self, saved):
        raise AssertionError("the recomputed path read the forward's probabilities")

    def backward(self, *args, dp_extra=None, delta_extra=None, **kwargs):
        assert dp_extra is None and delta_extra is None, (
            "the recomputed path handed the kernels an extra score gradient"
        )
        return super().backward(*args, **kwargs)


@pytest.fixture(scope="module", autouse=True)
def lse_only_backend():
    register_backend(LseOnlyCpuBackend())
    yield
    unregister_backend(LSE_ONLY)


@pytest.fixture(scope="module")
def hub_graph():
    rowptr, col = rmat_with_hub()
    degree = rowptr.diff()
    assert bool((degree == 0).any()) and bool((degree == 1).any()) and int(degree.max()) > 4096
    return rowptr, col


def test_reference_edge_values_are_the_attention_weighted_sum():
    gen = torch.Generator().manual_seed(0)
    rowptr = torch.tensor([0, 3, 3, 4, 9], dtype=torch.int64)
    col = torch.randint(0, 6, (9,), generator=gen, dtype=torch.int32)
    q, k, v = (
        torch.randn(4, 2, 8, generator=gen),
        torch.randn(6, 2, 8, generator=gen),
        torch.randn(6, 2, 8, generator=gen),
    )
    bias, u = torch.randn(9, 2, generator=gen), torch.randn(9, 3, generator=gen)
    y, z = sparse_attention_reference(rowptr, col, q, k, v, 0.3, bias, u)
    for i in range(4):
        edges = list(range(int(rowptr[i]), int(rowptr[i + 1])))
        if not edges:
            assert bool((z[i] == 0).all()) and bool((y[i] == 0).all())
            continue
        src = col[edges].long()
        a = torch.softmax(0.3 * torch.einsum("hd,ehd->eh", q[i], k[src]) + bias[edges], dim=0)
        torch.testing.assert_close(z[i], torch.einsum("eh,ec->hc", a, u[edges]))
        torch.testing.assert_close(y[i], torch.einsum("eh,ehd->hd", a, v[src]))


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("backend", ["cpu", LSE_ONLY])
def test_fused_edge_values_match_the_reference_on_a_hub_graph(hub_graph, backend, dtype, with_bias):
    rowptr, col = hub_graph
    check_edge_values(backend, rowptr, col, N_SRC, HEADS, DIM, dtype, "cpu", with_bias=with_bias)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cpu_row_sums_equal_torchs(dtype):
    """The CPU backend's numba passes (``ops/cpu/edge_value_kernels.py``) against torch's
    ``edge_value_sum`` / ``edge_value_grad``, on rows of degree 0, 1..17, 1024 and 8193."""
    rowptr, col, _ = degree_edge_cases()
    gen = torch.Generator().manual_seed(3)
    n, e, channels = rowptr.numel() - 1, col.numel(), 5
    p_EH = torch.rand((e, HEADS), generator=gen, dtype=dtype)
    u_EC, dz_NHC = (
        torch.randn((e, channels), generator=gen, dtype=dtype),
        torch.randn((n, HEADS, channels), generator=gen, dtype=dtype),
    )
    cpu = CpuBackend()
    z, g = cpu.value_sum(rowptr, col, p_EH, u_EC), cpu.value_grad(rowptr, col, dz_NHC, u_EC)
    assert z.dtype == g.dtype == dtype and z.shape == (n, HEADS, channels) and g.shape == (e, HEADS)
    assert_relative_close(z, edge_values.edge_value_sum(rowptr, col, p_EH, u_EC), 1e-5)  # compared in fp32
    assert_relative_close(g, edge_values.edge_value_grad(rowptr, col, dz_NHC, u_EC), 1e-5)
    assert torch.equal(cpu.value_sum(rowptr, col, p_EH, u_EC), z)  # deterministic


def test_recomputed_path_gives_the_same_result_in_many_chunks(hub_graph, monkeypatch):
    rowptr, col = hub_graph
    whole = check_edge_values(LSE_ONLY, rowptr, col, N_SRC, HEADS, DIM, torch.float32, "cpu")
    monkeypatch.setattr(edge_values, "CHUNK_BYTES", 1000 * HEADS * DIM * 4)  # 1000 edges a chunk
    assert edge_values.chunk_edges(HEADS, DIM) == 1000 and col.numel() > 30 * 1000
    chunked = check_edge_values(LSE_ONLY, rowptr, col, N_SRC, HEADS, DIM, torch.float32, "cpu")
    for a, b in zip(whole, chunked):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_each_backend_takes_the_path_its_kernels_allow(monkeypatch):
    """The CPU kernels keep p and take the extra score gradient; the CUDA backend (no CuPy needed)
    keeps only lse, so its edge values run the recomputed path around its unchanged kernels."""
    assert CpuBackend.supports_edge_values and CpuBackend.keeps_probabilities
    assert CudaBackend.supports_edge_values and not CudaBackend.keeps_probabilities
    assert not hasattr(CudaBackend, "probabilities")
    taken = []
    for path in ("FusedEdgeValues", "RecomputedEdgeValues"):
        monkeypatch.setattr(
            getattr(edge_values, path), "apply", lambda *args, path=path: taken.append((path, args[0].name))
        )
    rowptr, col = torch.tensor([0, 1], dtype=torch.int64), torch.tensor([0], dtype=torch.int32)
    q, u = torch.zeros(1, 1, 8), torch.zeros(1, 2)
    for backend in (CpuBackend(), CudaBackend()):
        FusedBackend.attention(backend, rowptr, col, q, q, q, 1.0, edge_values=u)
    assert taken == [("FusedEdgeValues", "cpu"), ("RecomputedEdgeValues", "cuda")]


@pytest.mark.parametrize("backend", ["cpu", LSE_ONLY])
def test_gradients_only_for_the_inputs_that_require_them(backend):
    rowptr = torch.tensor([0, 3, 3, 4, 9, 10], dtype=torch.int64)
    col = torch.randint(0, 6, (10,), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    gen = torch.Generator().manual_seed(2)
    q, k, v, bias, u = (
        torch.randn(*shape, generator=gen) for shape in ((5, 2, 8), (6, 2, 8), (6, 2, 8), (10, 2), (10, 3))
    )
    for need in (
        (True, False, False, False),
        (False, True, True, False),
        (False, False, True, True),
        (True, True, False, True),
    ):
        inputs = [t.clone().requires_grad_(r) for t, r in zip((q, k, v, bias), need)]
        wanted = [t for t in inputs if t.requires_grad]
        y, z = sparse_attention(rowptr, col, *inputs[:3], bias=inputs[3], edge_values=u, backend=backend)
        got = torch.autograd.grad((y.square().sum() + z.sum()), wanted)
        ref = [t.detach().requires_grad_(t.requires_grad) for t in inputs]
        y, z = sparse_attention_reference(rowptr, col, *ref[:3], 8**-0.5, ref[3], u)
        want = torch.autograd.grad((y.square().sum() + z.sum()), [t for t in ref if t.requires_grad])
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)


class NoEdgeValues(Backend):
    name, priority, device_type, supports_bias = "no-edge-values", 100, "cpu", True

    def attention(self, rowptr, col, q, k, v, scale, bias=None):
        return torch.zeros_like(q)


def test_a_backend_without_edge_values_is_refused_or_passed_over():
    rowptr, col = torch.tensor([0, 2, 2, 3], dtype=torch.int64), torch.tensor([0, 1, 1], dtype=torch.int32)
    q, k, v = torch.randn(3, 2, 8), torch.randn(2, 2, 8), torch.randn(2, 2, 8)
    u = torch.randn(3, 2)
    register_backend(NoEdgeValues())
    try:
        with pytest.raises(ValueError, match="no-edge-values backend: it takes no edge values"):
            sparse_attention(rowptr, col, q, k, v, edge_values=u, backend="no-edge-values")
        y, z = sparse_attention(rowptr, col, q, k, v, edge_values=u, backend="auto")  # auto passes it over
        torch.testing.assert_close(z, sparse_attention_reference(rowptr, col, q, k, v, 8**-0.5, None, u)[1])
    finally:
        unregister_backend("no-edge-values")


def test_edge_values_are_checked():
    rowptr = torch.tensor([0, 2], dtype=torch.int64)
    col = torch.tensor([0, 1], dtype=torch.int32)
    q, k, v = torch.randn(1, 1, 8), torch.randn(2, 1, 8), torch.randn(2, 1, 8)
    with pytest.raises(ValueError, match=r"edge_values must be \[E, C\] with E = 2"):
        sparse_attention(rowptr, col, q, k, v, edge_values=torch.zeros(3, 2))
    with pytest.raises(ValueError, match="edge_values take no gradient"):
        sparse_attention(rowptr, col, q, k, v, edge_values=torch.zeros(2, 2, requires_grad=True))


@pytest.mark.parametrize("name", ["cpu", LSE_ONLY, "reference"])
def test_blockwise_passes_with_edge_values_equal_the_whole(hub_graph, name):
    """Three blocks of sources (one holds no edge of many rows), each with its edges' slices of the
    bias and the edge values: merged, z is the whole op's z; the blocks' backward with the whole
    (y, lse, z) and dz gives the whole op's dq, dk, dv and dbias. On the CPU kernels' own path, and
    on the recomputed one (the CUDA backend's, here the CPU kernels without their probabilities; the
    reference backend's passes keep only lse too)."""
    rowptr, col = hub_graph
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, HEADS, DIM)
    bias = score_bias(col.numel(), HEADS).requires_grad_()
    gen = torch.Generator().manual_seed(5)
    u = torch.randn(col.numel(), 3, generator=gen)
    dy, dz = torch.randn(q.shape, generator=gen), torch.randn(q.shape[0], HEADS, 3, generator=gen)
    y_want, z_want = sparse_attention_reference(rowptr, col, q, k, v, DIM**-0.5, bias, u)
    want = torch.autograd.grad((y_want, z_want), (q, k, v, bias), (dy, dz))
    parts = source_blocks(rowptr, col, ((0, 1), (1, 200), (200, N_SRC)))  # block 0: source 0 only
    assert int(parts[0][0][-1]) > 0 and bool((parts[0][0].diff() == 0).any())  # rows with no edge in a block
    blocks = [
        attention_forward(r, c, q, k[lo:hi], v[lo:hi], bias=bias[keep], edge_values=u[keep], backend=name)
        for r, c, lo, hi, keep in parts
    ]
    whole = merge(merge(blocks[0], blocks[1]), blocks[2])
    assert_relative_close(whole[0], y_want.detach(), 1e-5)
    assert_relative_close(whole[2], z_want.detach(), 1e-5)
    dq, dk, dv, dbias = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), torch.zeros_like(bias)
    for (r, c, lo, hi, keep), block in zip(parts, blocks):
        dq_b, dk_b, dv_b, dbias_b = attention_backward(
            r,
            c,
            q,
            k[lo:hi],
            v[lo:hi],
            block,
            dy,
            bias=bias[keep],
            edge_values=u[keep],
            dz=dz,
            whole=whole,
            backend=name,
        )
        dq, dk[lo:hi], dv[lo:hi], dbias[keep] = dq + dq_b, dk_b, dv_b, dbias_b
    for got, expected in zip((dq, dk, dv, dbias), want):
        assert_relative_close(got, expected, TOLERANCE[torch.float32])
    alone = attention_forward(rowptr, col, q, k, v, bias=bias, edge_values=u, backend=name)  # one block: the whole op
    assert_relative_close(alone.z, z_want.detach(), 1e-5)
    grads = attention_backward(rowptr, col, q, k, v, alone, dy, bias=bias, edge_values=u, dz=dz, backend=name)
    for got, expected in zip(grads, want):
        assert_relative_close(got, expected, TOLERANCE[torch.float32])


def test_blockwise_passes_refuse_edge_values_of_the_wrong_length():
    rowptr, col = torch.tensor([0, 2], dtype=torch.int64), torch.tensor([0, 1], dtype=torch.int32)
    q, k, v = torch.randn(1, 1, 8), torch.randn(2, 1, 8), torch.randn(2, 1, 8)
    with pytest.raises(ValueError, match=r"edge_values must be \[E_block, C\] with E_block = 2"):
        attention_forward(rowptr, col, q, k, v, edge_values=torch.zeros(3, 2), backend="cpu")
