"""Linear global attention (elu + 1 kernel) against its dense O(N^2) definition, its node scopes, and
the blocks that carry it: every parameter trains, and a node without in-edges sees the graph."""

import pytest
import torch
import torch.nn.functional as F

from dsgraph.comm import GlobalNodes, GraphParallelGroup
from dsgraph.models import GraphTransformer, ModelOptions
from dsgraph.models.global_attention import feature_map, linear_attention, sum_values
from dsgraph.ops import sparse_attention
from tests.graphs import random_graph

ONE = GraphParallelGroup()


def dense_reference(q, k, v, rows=None):
    """y_i = sum_j w_ij v_j / sum_j w_ij with w_ij = <phi(q_i), phi(k_j)> per head, j over ``rows``, in fp64."""
    k, v = (k, v) if rows is None else (k[rows], v[rows])
    w_HNM = torch.einsum("nhd,mhd->hnm", feature_map(q).double(), feature_map(k).double())
    return torch.einsum("hnm,mhd->nhd", w_HNM, v.double()) / (w_HNM.sum(-1).T[..., None] + 1e-6)


def _inputs(n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, 4, 8, generator=g) * 2).to(dtype).requires_grad_(True) for _ in range(3)]


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("rows", [None, slice(3, 40), "mask"], ids=["all", "slice", "mask"])
def test_linear_attention_matches_the_dense_formula_with_its_gradients(dtype, tol, rows):
    n = 57
    if rows == "mask":
        rows = torch.arange(n) % 3 == 1
    q, k, v = _inputs(n, dtype)
    y = linear_attention(q, k, v, GlobalNodes(ONE, rows))
    assert y.dtype == dtype
    ref = dense_reference(q, k, v, rows)
    torch.testing.assert_close(y.double(), ref, rtol=tol, atol=tol)
    upstream = torch.randn(n, 4, 8, generator=torch.Generator().manual_seed(1))
    got = torch.autograd.grad((y.double() * upstream).sum(), (q, k, v))
    want = torch.autograd.grad((ref * upstream).sum(), (q, k, v))
    for g, w, name in zip(got, want, "qkv"):
        scale = w.abs().max().clamp_min(1e-12)
        assert float((g.double() - w).abs().max() / scale) < tol * 4, name


def test_an_empty_scope_gives_zeros_and_a_one_row_scope_gives_its_value():
    q, k, v = _inputs(9, torch.float32)
    empty = linear_attention(q, k, v, GlobalNodes(ONE, slice(0, 0)))
    assert torch.equal(empty, torch.zeros_like(empty))
    one = linear_attention(q, k, v, GlobalNodes(ONE, slice(4, 5)))
    torch.testing.assert_close(one, v[4:5].detach().expand_as(one), rtol=1e-5, atol=1e-5)
    assert sum_values(4, 8) == 4 * 8 * 8 + 4 * 8


def test_linear_attention_keeps_q_k_v_and_the_sums_alone():
    """No fp32 row of the feature maps or the numerator is kept for backward (bf16 inputs): backward
    recomputes them per row chunk; gradients as the dense formula's (first test)."""
    n = 300
    q, k, v = _inputs(n, torch.bfloat16)
    kept = []

    def pack(t):
        kept.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = linear_attention(q, k, v, GlobalNodes(ONE))
    assert {t.untyped_storage().data_ptr() for t in kept if t.dim() == 3} == {
        x.untyped_storage().data_ptr() for x in (q, k, v)
    }
    assert [t.numel() for t in kept if t.dtype == torch.float32] == [sum_values(4, 8)]
    y.float().sum().backward()
    assert all(x.grad is not None and x.grad.dtype == torch.bfloat16 for x in (q, k, v))


def test_row_chunks_give_the_one_chunk_result(monkeypatch):
    """Sums and gradients formed over many row chunks equal those of one chunk (fp32, 1e-6)."""
    import dsgraph.models.global_attention as ga

    q, k, v = _inputs(101, torch.float32)
    upstream = torch.randn(101, 4, 8)
    results = []
    for values in (1 << 20, 32 * 7):  # one chunk; chunks of 7 rows
        monkeypatch.setattr(ga, "CHUNK_VALUES", values)
        y = linear_attention(q, k, v, GlobalNodes(ONE))
        results.append([y, *torch.autograd.grad((y * upstream).sum(), (q, k, v))])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def _model(options, layers=2, **kw):
    torch.manual_seed(0)
    return GraphTransformer(
        12,
        5,
        hidden=32,
        heads=4,
        layers=layers,
        dropout=0.3,
        input_dropout=0.2,
        attention_dropout=0.3,
        seed=7,
        options=options,
        **kw,
    )


GLOBAL_OPTIONS = [
    ModelOptions(block="transformer", input_projection=True, norm="pre", head="linear", global_attention="linear"),
    ModelOptions(global_attention="linear"),
    ModelOptions(
        block="attention",
        input_projection=True,
        norm="post",
        residual="linear",
        head="linear",
        global_attention="linear",
    ),
]


@pytest.mark.parametrize("options", GLOBAL_OPTIONS, ids=["transformer", "gat", "attention-linear-head"])
def test_global_blocks_train_every_parameter_and_reach_nodes_without_in_edges(options):
    graph = random_graph()  # nodes 0, 7 and 102 have no in-edges (no self loops added)
    local = lambda q, k, v: sparse_attention(graph.rowptr, graph.col, q, k, v, backend="reference")  # noqa: E731
    ids = torch.arange(graph.num_nodes)
    model = _model(options, layers=3)
    assert all(block.global_attn is not None for block in model.blocks[: 3 if options.head == "linear" else 2])
    logits = model(graph.x, local, ids, step=1)
    F.cross_entropy(logits, graph.y).backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing
    far = graph.x.clone()
    far[50:60] += 3.0  # nodes far from node 0, which has no in-edges
    for opts, reaches in ((options, True), (ModelOptions(**{**options.to_dict(), "global_attention": "none"}), False)):
        m = _model(opts, layers=3).eval()
        moved = (m.embed(far, local, ids)[1][0] - m.embed(graph.x, local, ids)[1][0]).abs().max()  # node 0's embedding
        assert (moved > 1e-4) == reaches, (opts, float(moved))


def test_global_attention_is_checked():
    with pytest.raises(ValueError, match=r"'model.global_attention' must be one of none, linear; got 'performer'"):
        ModelOptions(global_attention="performer")
    with pytest.raises(ValueError, match="global_attention 'linear' needs a hidden block"):
        _model(ModelOptions(block="attention", head="attention", global_attention="linear"), layers=1)
