"""The op's edge values (``dsgraph/ops/edge_values.py``): with u [E, C] it also returns
z_i = sum_j a_ij u_ij, from which the model builds TransformerConv's edge-conditioned value. The
reference is checked against a per-row softmax written out; the CPU backend against the reference
(y, z and the gradients of q, k, v and bias for a loss that reads both) on a power-law graph with
rows of degree 0, 1 and more than 4096, in fp32 and bf16 (gradcheck in fp64: test_score_bias.py)."""

from __future__ import annotations

import pytest
import torch

from dsgraph.ops import sparse_attention
from dsgraph.ops.reference import sparse_attention_reference
from tests.ops.cases import N_SRC, TOLERANCE, assert_relative_close, qkv, rmat_with_hub, score_bias

HEADS, DIM, CHANNELS = 4, 16, 3


def _y_z_grads(backend, rowptr, col, q, k, v, bias, u, dy, dz):
    y, z = sparse_attention(rowptr, col, q, k, v, bias=bias, edge_values=u, backend=backend)
    grads = torch.autograd.grad((y, z), (q, k, v, bias), (dy, dz))
    return (y, z, *grads)


def test_reference_edge_values_are_the_attention_weighted_sum():
    gen = torch.Generator().manual_seed(0)
    rowptr = torch.tensor([0, 3, 3, 4, 9], dtype=torch.int64)
    col = torch.randint(0, 6, (9,), generator=gen, dtype=torch.int32)
    q, k, v = torch.randn(4, 2, 8, generator=gen), torch.randn(6, 2, 8, generator=gen), torch.randn(6, 2, 8, generator=gen)
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_cpu_edge_values_match_the_reference_on_a_hub_graph(dtype):
    rowptr, col = rmat_with_hub()
    degree = rowptr.diff()
    assert bool((degree == 0).any()) and bool((degree == 1).any()) and int(degree.max()) > 4096
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, HEADS, DIM, dtype)
    bias = score_bias(col.numel(), HEADS, dtype)
    gen = torch.Generator().manual_seed(3)
    u = torch.randn(col.numel(), CHANNELS, generator=gen).to(dtype)
    dy, dz = torch.randn(q.shape, generator=gen).to(dtype), torch.randn(q.shape[0], HEADS, CHANNELS, generator=gen).to(dtype)
    got = _y_z_grads("cpu", rowptr, col, q, k, v, bias, u, dy, dz)
    fp32 = [t.detach().float().requires_grad_() for t in (q, k, v, bias)]
    want = _y_z_grads("reference", rowptr, col, *fp32[:3], fp32[3], u.float(), dy.float(), dz.float())
    for name, a, b in zip(("y", "z", "dq", "dk", "dv", "dbias"), got, want):
        assert a.dtype == dtype and a.shape == b.shape, name
        assert_relative_close(a, b.to(dtype), TOLERANCE[dtype])
    empty = rowptr[1:] == rowptr[:-1]
    assert bool((got[1][empty] == 0).all())


def test_edge_values_are_checked():
    rowptr = torch.tensor([0, 2], dtype=torch.int64)
    col = torch.tensor([0, 1], dtype=torch.int32)
    q, k, v = torch.randn(1, 1, 8), torch.randn(2, 1, 8), torch.randn(2, 1, 8)
    with pytest.raises(ValueError, match=r"edge_values must be \[E, C\] with E = 2"):
        sparse_attention(rowptr, col, q, k, v, edge_values=torch.zeros(3, 2))
    with pytest.raises(ValueError, match="edge_values take no gradient"):
        sparse_attention(rowptr, col, q, k, v, edge_values=torch.zeros(2, 2, requires_grad=True))
