"""GCN's and SAGE's aggregation (``dsgraph/models/conv.py``: the attention with constant scores)
against a dense oracle, on every CPU backend, in fp32 (1e-5) and bf16 (2e-2), with rows of in-degree
0, 1 and more than 4096, forward and the values' gradient."""

import pytest
import torch

from dsgraph.models.conv import aggregate
from dsgraph.ops import sparse_attention

HUB = 5000  # in-edges of the hub row: more than 4096


def _graph():
    """rowptr, col of 40 rows: row 0 none, row 1 one, row 2 the hub (HUB in-edges, sources repeat),
    the rest 1 to 6 random sources."""
    g = torch.Generator().manual_seed(0)
    rows = [torch.empty(0, dtype=torch.int64), torch.tensor([7]), torch.randint(0, 40, (HUB,), generator=g)]
    rows += [torch.randint(0, 40, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g) for _ in range(37)]
    rowptr = torch.tensor([0] + [len(r) for r in rows]).cumsum(0)
    return rowptr, torch.cat(rows)


def _weights(rowptr, col, kind) -> torch.Tensor:
    """Dense [n, n] fp64: A[i, j] = edge count j -> i; sage A / d_i, gcn D^-1/2 A D^-1/2 (d clamped to 1)."""
    n = rowptr.numel() - 1
    dst = torch.repeat_interleave(torch.arange(n), rowptr.diff())
    a = torch.zeros(n, n, dtype=torch.float64).index_put_(
        (dst, col), torch.ones(col.numel(), dtype=torch.float64), True
    )
    d = rowptr.diff().clamp_min(1).double()
    return a / d[:, None] if kind == "sage" else a / d[:, None].sqrt() / d[None, :].sqrt()


def _rel(a, b) -> float:
    return float((a.double() - b).norm() / b.norm())


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_aggregation_matches_the_dense_oracle(backend, dtype, tol, kind):
    rowptr, col = _graph()

    def attention(q, k, v):
        return sparse_attention(rowptr, col, q, k, v, backend=backend)

    attention.degrees = rowptr.diff()
    v = torch.randn(40, 2, 16, generator=torch.Generator().manual_seed(1)).to(dtype).requires_grad_()
    y = aggregate(attention, v, kind)
    w = _weights(rowptr, col, kind)
    assert y.dtype == dtype and _rel(y, torch.einsum("ij,jhd->ihd", w, v.detach().double())) < tol
    assert float(y[0].abs().max()) == 0.0  # a row without in-edges aggregates nothing
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    (y * dy).sum().backward()
    assert _rel(v.grad, torch.einsum("ij,ihd->jhd", w, dy.double())) < tol


def test_gcn_without_row_degrees_says_so():
    with pytest.raises(ValueError, match="needs the in-degree of the rows"):
        aggregate(lambda q, k, v: v, torch.zeros(3, 1, 8), "gcn")


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_aggregation_asks_for_constant_scores(kind):
    """The layers hand the strategy's attention q = k = None, so the op computes no scores (and the
    strategies move V alone), not zero-valued q and k."""
    calls = []

    def attention(q, k, v):
        calls.append((q, k))
        return v

    attention.degrees = torch.tensor([1, 2, 0])
    aggregate(attention, torch.ones(3, 1, 8), kind)
    assert calls == [(None, None)]
