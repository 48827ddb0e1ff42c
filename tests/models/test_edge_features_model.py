"""The model's edge features: the score bias is e'_ij W_b with e' = [edge_attr, added-loop flag] (so
an added self loop's bias is a learned embedding), and the edge-conditioned value computed as
y_i + z_i W_e equals TransformerConv's sum_j a_ij (v_j + e'_ij W_e) written out per edge."""

from __future__ import annotations

import pytest
import torch

from dsgraph.graph.rank_graph import EdgeData
from dsgraph.models import GraphTransformer
from dsgraph.models.blocks import EdgeBias, EdgeValue, attend
from dsgraph.models.options import ModelOptions
from dsgraph.ops import sparse_attention

ROWPTR = torch.tensor([0, 2, 2, 5, 6], dtype=torch.int64)
COL = torch.tensor([0, 1, 0, 2, 3, 3], dtype=torch.int32)  # row 1 has no in-edges; edges 3 and 5 are self loops
ADDED = torch.tensor([False, False, False, False, False, True])  # edge 5 was added for the model


class Attention:
    """One process's attention over a fixed CSR, with its edges' features (what strategies hold)."""

    def __init__(self, attr: torch.Tensor):
        self.edges = EdgeData(attr=attr, added_loop=ADDED)

    def __call__(self, q, k, v, bias=None, edge_values=None):
        return sparse_attention(ROWPTR, COL, q, k, v, bias=bias, edge_values=edge_values, backend="reference")


def _attr(width: int = 3) -> torch.Tensor:
    attr = torch.randn(COL.numel(), width, generator=torch.Generator().manual_seed(0))
    attr[ADDED] = 0.0
    return attr


def test_an_added_self_loop_gets_the_learned_embedding_row():
    torch.manual_seed(0)
    bias = EdgeBias(3, heads=2)
    attention = Attention(_attr())
    b = bias(attention)
    assert b.shape == (COL.numel(), 2)
    torch.testing.assert_close(b[5], bias.proj.weight[:, 3])  # the flag's row: features are zero
    torch.testing.assert_close(
        b[3], attention.edges.attr[3] @ bias.proj.weight[:, :3].T
    )  # a dataset loop: its features


def test_the_edge_conditioned_value_equals_the_per_edge_sum():
    torch.manual_seed(1)
    heads, dim = 2, 4
    bias, value = EdgeBias(3, heads), EdgeValue(3, heads, dim)
    attention = Attention(_attr())
    q, k, v = (torch.randn(4, heads, dim) for _ in range(3))
    got = attend(attention, q, k, v, bias, value)
    e = attention.edges.features()  # [E, 4]
    scores = (
        torch.einsum("ehd,ehd->eh", q[torch.repeat_interleave(torch.arange(4), ROWPTR.diff())], k[COL.long()])
        * dim**-0.5
    )
    scores = scores + bias(attention)
    w_HDC = value.proj.weight.view(heads, dim, -1)
    want = torch.zeros(4, heads, dim)
    for i in range(4):
        lo, hi = int(ROWPTR[i]), int(ROWPTR[i + 1])
        if lo == hi:
            continue
        a = torch.softmax(scores[lo:hi], dim=0)  # [e_i, H]
        per_edge = v[COL[lo:hi].long()] + torch.einsum("ec,hdc->ehd", e[lo:hi], w_HDC)  # v_j + e'_ij W_e^h
        want[i] = torch.einsum("eh,ehd->hd", a, per_edge)
    torch.testing.assert_close(got, want)
    assert bool((got[1] == 0).all())


def test_the_model_needs_edge_features_when_it_reads_them():
    with pytest.raises(ValueError, match="model.edge_features is 'bias', but the dataset has no edge features"):
        GraphTransformer(5, 3, hidden=8, heads=2, options=ModelOptions(edge_features="bias"), edge_dim=0)
    model = GraphTransformer(5, 3, hidden=8, heads=2, options=ModelOptions(edge_features="bias_value"), edge_dim=3)
    assert all(block.edge_bias is not None and block.edge_value is not None for block in model.blocks)
    plain = GraphTransformer(5, 3, hidden=8, heads=2, edge_dim=3)  # 'none': the edge features are not read
    assert all(block.edge_bias is None for block in plain.blocks)


def test_gradients_reach_the_edge_projections():
    torch.manual_seed(2)
    model = GraphTransformer(
        5,
        3,
        hidden=8,
        heads=2,
        layers=2,
        dropout=0.0,
        input_dropout=0.0,
        options=ModelOptions(edge_features="bias_value"),
        edge_dim=3,
    )
    logits = model(torch.randn(4, 5), Attention(_attr()), torch.arange(4))
    logits.square().sum().backward()
    for block in model.blocks:
        assert float(block.edge_bias.proj.weight.grad.abs().sum()) > 0
        assert float(block.edge_value.proj.weight.grad.abs().sum()) > 0
