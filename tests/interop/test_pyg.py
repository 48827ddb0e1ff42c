"""Graph <-> PyG Data conversion: exact round trips, edge direction, defaults and bad inputs."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from dsgraph.graph.graph import Graph

tg_data = pytest.importorskip("torch_geometric.data")
from dsgraph.graph.interop import from_pyg, to_pyg  # noqa: E402

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


def test_graph_to_pyg_and_back_is_exact():
    graph = sample_graph()
    assert_same_graph(from_pyg(to_pyg(graph)), graph)


def test_to_pyg_keeps_edge_direction_and_node_data():
    graph = sample_graph()
    data = to_pyg(graph)
    assert data.num_nodes == N
    pairs = sorted(zip(data.edge_index[0].tolist(), data.edge_index[1].tolist()))
    assert pairs == sorted(zip(SRC.tolist(), DST.tolist()))  # row 0 = sources, multiplicity kept
    assert torch.equal(data.x, graph.x) and torch.equal(data.y, graph.y)
    assert torch.equal(data.test_mask, graph.test_mask)


def test_pyg_to_graph_and_back_keeps_edges_sorted_by_destination():
    rng = np.random.default_rng(1)
    edge_index = torch.from_numpy(rng.integers(0, 20, size=(2, 60)))
    data = tg_data.Data(
        x=torch.from_numpy(rng.standard_normal((20, 4)).astype(np.float32)),
        edge_index=edge_index,
        y=torch.from_numpy(rng.integers(0, 3, size=20)),
        train_mask=torch.from_numpy(rng.random(20) < 0.5),
        val_mask=torch.zeros(20, dtype=torch.bool),
        test_mask=torch.from_numpy(rng.random(20) < 0.2),
    )
    back = to_pyg(from_pyg(data))
    order = torch.from_numpy(np.argsort(edge_index[1].numpy(), kind="stable"))
    assert torch.equal(back.edge_index, edge_index[:, order])
    for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(back[key], data[key]), key


def test_from_pyg_defaults_for_missing_node_data():
    graph = from_pyg(tg_data.Data(edge_index=torch.tensor([[0, 1], [1, 4]]), num_nodes=5))
    assert graph.num_nodes == 5 and graph.num_edges == 2
    assert torch.equal(graph.x, torch.ones(5, 1)) and torch.equal(graph.y, torch.full((5,), -1))
    assert not graph.train_mask.any() and not graph.val_mask.any() and not graph.test_mask.any()


def test_from_pyg_squeezes_label_column():
    data = tg_data.Data(edge_index=torch.tensor([[0], [1]]), y=torch.tensor([[1], [0]]), num_nodes=2)
    assert from_pyg(data).y.tolist() == [1, 0]


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("train_mask", torch.zeros(3, 2, dtype=torch.bool), "'train_mask' must be a 1-D node mask"),
        ("y", torch.zeros(3, 4, dtype=torch.int64), "'y' must hold one class id per node"),
        ("y", torch.tensor([0.5, 1.0, 2.0]), "'y' must hold integer class ids"),
    ],
)
def test_from_pyg_rejects_bad_arrays(field, value, message):
    data = tg_data.Data(edge_index=torch.tensor([[0], [1]]), num_nodes=3)
    data[field] = value
    with pytest.raises(ValueError, match=message):
        from_pyg(data)


def test_from_pyg_rejects_out_of_range_edges():
    with pytest.raises(ValueError, match="PyG Data: edge index out of range"):
        from_pyg(tg_data.Data(edge_index=torch.tensor([[0], [3]]), num_nodes=3))


@pytest.mark.slow
def test_core_imports_neither_dgl_nor_pyg():
    code = (
        "import sys, dsgraph.graph, dsgraph.graph.interop, dsgraph.graph.convert, dsgraph.cli\n"
        "bad = [m for m in ('dgl', 'torch_geometric', 'matplotlib') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
