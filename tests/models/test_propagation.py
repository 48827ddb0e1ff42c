"""APPNP's propagation of the logits (``dsgraph/models/propagation.py``, ``model.propagation_steps``)
against a dense oracle, (1 - a) D^-1/2 (A + I) D^-1/2 applied K times plus the teleport a z0, on both
CPU backends (fp32, 1e-5; bf16, 5e-2), forward and the logits' gradient; K = 0 is the identity; the
model's logits are its unpropagated logits, propagated; the options' validation names the key."""

import dataclasses

import pytest
import torch

from dsgraph.models.graph_transformer import GraphTransformer
from dsgraph.models.options import GAT, TRANSFORMER, ModelOptions
from dsgraph.models.propagation import propagate
from dsgraph.ops import sparse_attention


def _graph(n: int = 30):
    """rowptr, col of n rows with a self loop each and 0 to 5 random in-neighbours (sources repeat)."""
    g = torch.Generator().manual_seed(0)
    rows = [
        torch.cat([torch.tensor([i]), torch.randint(0, n, (int(torch.randint(0, 6, (1,), generator=g)),), generator=g)])
        for i in range(n)
    ]
    return torch.tensor([0] + [len(r) for r in rows]).cumsum(0), torch.cat(rows)


def _attention(rowptr, col, backend="reference"):
    def attention(q, k, v):
        return sparse_attention(rowptr, col, q, k, v, backend=backend)

    attention.degrees = rowptr.diff()
    return attention


def _dense(rowptr, col, z0, steps, alpha) -> torch.Tensor:
    """fp64 oracle: z <- (1 - alpha) D^-1/2 A D^-1/2 z + alpha z0, A[i, j] the edge count j -> i
    (self loops included), d the in-degree."""
    n = rowptr.numel() - 1
    dst = torch.repeat_interleave(torch.arange(n), rowptr.diff())
    a = torch.zeros(n, n, dtype=torch.float64).index_put_(
        (dst, col), torch.ones(col.numel(), dtype=torch.float64), True
    )
    d = rowptr.diff().clamp_min(1).double()
    w = a / d[:, None].sqrt() / d[None, :].sqrt()
    z = z0 = z0.double()
    for _ in range(steps):
        z = (1 - alpha) * w @ z + alpha * z0
    return z


def _rel(a, b) -> float:
    return float((a.detach().double() - b.detach()).norm() / b.detach().norm())


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 5e-2)])
@pytest.mark.parametrize("heads, classes", [(1, 7), (2, 5), (8, 7)])
def test_propagation_matches_the_dense_oracle(backend, dtype, tol, heads, classes):
    rowptr, col = _graph()
    z0 = torch.randn(30, classes, generator=torch.Generator().manual_seed(1)).to(dtype).requires_grad_()
    z = propagate(z0, _attention(rowptr, col, backend), heads, 10, 0.1)
    assert z.dtype == dtype and z.shape == z0.shape
    assert _rel(z, _dense(rowptr, col, z0.detach(), 10, 0.1)) < tol
    dz = torch.randn(z.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    (z * dz).sum().backward()
    # the logits' gradient: autograd through the fp64 oracle
    z0_64 = z0.detach().double().requires_grad_()
    (_dense(rowptr, col, z0_64, 10, 0.1) * dz.double()).sum().backward()
    assert _rel(z0.grad, z0_64.grad) < tol


def test_zero_steps_is_the_identity():
    z0 = torch.randn(4, 3)
    assert propagate(z0, lambda q, k, v: 1 / 0, 2, 0, 0.1) is z0


@pytest.mark.parametrize("shape", [GAT, TRANSFORMER], ids=["head-attention", "head-linear"])
def test_the_models_logits_are_propagated(shape):
    """Either head: the logits with propagation are the logits without it, propagated; the
    embeddings are unchanged."""
    rowptr, col = _graph()
    attention = _attention(rowptr, col)
    x, ids = torch.randn(30, 12, generator=torch.Generator().manual_seed(3)), torch.arange(30)
    outs = []
    for steps in (0, 10):
        torch.manual_seed(0)
        options = dataclasses.replace(shape, propagation_steps=steps, propagation_alpha=0.2)
        model = GraphTransformer(12, 5, hidden=16, heads=2, layers=2, dropout=0.0, input_dropout=0.0, options=options)
        outs.append(model.eval().embed(x, attention, ids))
    (z0, h0), (z, h) = outs
    assert torch.equal(h, h0)
    assert _rel(z, _dense(rowptr, col, z0, 10, 0.2)) < 1e-5


@pytest.mark.parametrize(
    "section, message",
    [
        ({"propagation_steps": -1}, "'model.propagation_steps' must be >= 0"),
        ({"propagation_steps": 2.0}, "'model.propagation_steps' must be int"),
        ({"propagation_alpha": 0}, r"'model.propagation_alpha' must be in \(0, 1\]"),
        ({"propagation_alpha": 1.5}, r"'model.propagation_alpha' must be in \(0, 1\]"),
        ({"propagation_alpha": "0.1"}, "'model.propagation_alpha' must be float"),
        ({"propagation_alpha": True}, "'model.propagation_alpha' must be float"),
    ],
)
def test_propagation_options_are_validated(section, message):
    with pytest.raises(ValueError, match=message):
        ModelOptions.from_dict(section)


def test_propagation_options_read_from_json():
    o = ModelOptions.from_dict({"propagation_steps": 10, "propagation_alpha": 1})
    assert (o.propagation_steps, o.propagation_alpha) == (10, 1)
    assert ModelOptions().propagation_steps == 0
