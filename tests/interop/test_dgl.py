"""Graph <-> DGLGraph conversion, run against real DGL 2.1.0 by tools/test_dgl_lane.sh.

DGL's wheels need torch <= 2.2, so the main environment skips this file; the lane sets
DSGRAPH_REQUIRE_DGL=1 so that a DGL that fails to import is an error there, not a skip.
"""

import os

import numpy as np
import pytest
import torch

from dsgraph.graph.graph import Graph

if os.environ.get("DSGRAPH_REQUIRE_DGL") == "1":
    import dgl
else:
    dgl = pytest.importorskip("dgl")
from dsgraph.graph.interop import from_dgl, to_dgl  # noqa: E402

# u -> v; a duplicate (2 -> 1), a self loop (4 -> 4), node 6 isolated, in-edges of 1 not sorted
SRC = np.array([3, 0, 2, 2, 1, 4, 4, 5, 2])
DST = np.array([1, 1, 1, 0, 2, 4, 3, 3, 1])
N = 7


def sample_graph() -> Graph:
    rng = np.random.default_rng(0)
    y = np.array([0, 2, 1, -1, 2, 0, -1])
    return Graph.from_edges(
        SRC,
        DST,
        x=rng.standard_normal((N, 3)).astype(np.float32),
        y=y,
        num_nodes=N,
        name="sample",
        train_mask=np.array([1, 1, 0, 0, 0, 0, 0], bool),
        val_mask=np.array([0, 0, 1, 0, 0, 0, 0], bool),
        test_mask=np.array([0, 0, 0, 0, 1, 1, 0], bool),
    )


def assert_same_graph(a: Graph, b: Graph) -> None:
    for name in ("rowptr", "col", "x", "y", "train_mask", "val_mask", "test_mask"):
        left, right = getattr(a, name), getattr(b, name)
        assert left.dtype == right.dtype, name
        assert torch.equal(left, right), name


def test_runs_against_dgl_2_1():
    assert dgl.__version__.startswith("2.1"), dgl.__version__


def test_graph_to_dgl_and_back_is_exact():
    graph = sample_graph()
    assert_same_graph(from_dgl(to_dgl(graph)), graph)


def test_to_dgl_keeps_edge_direction_and_node_data():
    graph = sample_graph()
    g = to_dgl(graph)
    assert g.num_nodes() == N and g.num_edges() == len(SRC)
    u, v = g.edges()
    assert sorted(zip(u.tolist(), v.tolist())) == sorted(zip(SRC.tolist(), DST.tolist()))
    # DGL's in-degree is the CSR row length: row v lists the sources of v's in-edges
    assert torch.equal(g.in_degrees(), graph.in_degrees())
    assert torch.equal(g.ndata["feat"], graph.x) and torch.equal(g.ndata["label"], graph.y)
    for mask in ("train_mask", "val_mask", "test_mask"):
        assert torch.equal(g.ndata[mask], getattr(graph, mask)), mask


def test_dgl_to_graph_and_back_keeps_edges_sorted_by_destination():
    rng = np.random.default_rng(1)
    src, dst = (torch.from_numpy(a) for a in rng.integers(0, 20, size=(2, 60)))
    g = dgl.graph((src, dst), num_nodes=20)
    g.ndata["feat"] = torch.from_numpy(rng.standard_normal((20, 4)).astype(np.float32))
    g.ndata["label"] = torch.from_numpy(rng.integers(0, 3, size=20))
    g.ndata["train_mask"] = torch.from_numpy(rng.random(20) < 0.5)
    back = to_dgl(from_dgl(g))
    order = torch.from_numpy(np.argsort(dst.numpy(), kind="stable"))
    u, v = back.edges()
    assert torch.equal(u, src[order]) and torch.equal(v, dst[order])
    for key in ("feat", "label", "train_mask"):
        assert torch.equal(back.ndata[key], g.ndata[key]), key
    assert not back.ndata["val_mask"].any()


def test_from_dgl_defaults_and_renamed_fields():
    g = dgl.graph((torch.tensor([0, 1]), torch.tensor([1, 4])), num_nodes=5)
    graph = from_dgl(g)
    assert torch.equal(graph.x, torch.ones(5, 1)) and torch.equal(graph.y, torch.full((5,), -1))
    g.ndata["h"] = torch.arange(10, dtype=torch.float32).reshape(5, 2)
    assert torch.equal(from_dgl(g, keys={"x": "h"}).x, g.ndata["h"])


def test_from_dgl_rejects_heterographs():
    g = dgl.heterograph({("a", "r", "b"): (torch.tensor([0]), torch.tensor([0]))})
    with pytest.raises(ValueError, match="only homogeneous graphs"):
        from_dgl(g)


def test_from_dgl_rejects_a_two_column_mask():
    g = dgl.graph((torch.tensor([0]), torch.tensor([1])), num_nodes=2)
    g.ndata["train_mask"] = torch.zeros(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="DGLGraph: array 'train_mask' must be a 1-D node mask"):
        from_dgl(g)


def test_edge_features_travel_as_edata_and_back_exactly():
    rng = np.random.default_rng(3)
    attr = rng.standard_normal((len(SRC), 4)).astype(np.float32)
    graph = Graph.from_edges(
        SRC,
        DST,
        x=np.ones((N, 1), np.float32),
        y=np.zeros(N, np.int64),
        num_nodes=N,
        train_mask=np.zeros(N, bool),
        val_mask=np.zeros(N, bool),
        test_mask=np.zeros(N, bool),
        edge_attr=attr,
    )
    g = to_dgl(graph)
    assert torch.equal(g.edata["feat"], graph.edge_attr)  # edge e of the DGLGraph is CSR edge e
    back = from_dgl(g)
    assert torch.equal(back.edge_attr, graph.edge_attr) and torch.equal(back.col, graph.col)
    shuffled = dgl.graph((torch.from_numpy(SRC), torch.from_numpy(DST)), num_nodes=N)  # edges in input order
    shuffled.edata["feat"] = torch.from_numpy(attr)
    assert torch.equal(from_dgl(shuffled).edge_attr, graph.edge_attr)  # sorted into CSR order with their edges
