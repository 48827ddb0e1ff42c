"""Partitioning, relabelling and quality figures, checked against brute-force computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dsgraph.graph import Graph, load_dataset
from dsgraph.graph.partition import (
    METHODS,
    halo_ids,
    partition_nodes,
    partition_quality,
    relabel,
    symmetric_adjacency,
)


@pytest.fixture(scope="module")
def cora() -> Graph:
    return load_dataset("cora")


@pytest.fixture(scope="module")
def rmat() -> Graph:
    return load_dataset("rmat:9:8", seed=3)


def skewed_graph(n: int = 400, seed: int = 0) -> Graph:
    """Low ids have many in-edges, high ids few: contiguous node ranges give unequal edge counts."""
    rng = np.random.default_rng(seed)
    degree = (200 * (np.arange(n) + 1.0) ** -0.8).astype(np.int64) + 1  # [N] power-law in-degree
    dst = np.repeat(np.arange(n), degree)
    src = rng.integers(0, n, dst.size)
    y = rng.integers(0, 3, n)
    return Graph.from_edges(
        src,
        dst,
        x=rng.standard_normal((n, 4)),
        y=y,
        train_mask=np.ones(n, bool),
        val_mask=np.zeros(n, bool),
        test_mask=np.zeros(n, bool),
        num_nodes=n,
    )


def edge_keys(graph: Graph, ids: np.ndarray | None = None) -> np.ndarray:
    """Sorted (dst, src) keys of all edges, optionally mapping node ids through ``ids`` first."""
    n = graph.num_nodes
    dst = np.repeat(np.arange(n), graph.in_degrees().numpy())
    src = graph.col.numpy().astype(np.int64)
    if ids is not None:
        dst, src = ids[dst], ids[src]
    return np.sort(dst * n + src)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("num_parts", [2, 4])
@pytest.mark.parametrize("dataset", ["cora", "rmat"])
def test_relabelling_is_a_valid_contiguous_partition(method, num_parts, dataset, request):
    graph = request.getfixturevalue(dataset)
    n = graph.num_nodes
    parts = partition_nodes(graph, num_parts, method, seed=1)
    assert parts.shape == (n,) and parts.min() >= 0 and parts.max() < num_parts

    new, perm, ranges = relabel(graph, parts, num_parts)
    new.validate("relabelled")
    assert np.array_equal(np.sort(perm), np.arange(n))  # a permutation
    assert ranges.shape == (num_parts, 2) and ranges[0, 0] == 0 and ranges[-1, 1] == n
    assert np.array_equal(ranges[1:, 0], ranges[:-1, 1])
    assert np.array_equal(ranges[:, 1] - ranges[:, 0], np.bincount(parts, minlength=num_parts))
    for r, (start, end) in enumerate(ranges):
        assert (parts[perm[start:end]] == r).all()  # part r owns exactly [start_r, end_r)
    assert np.array_equal(edge_keys(new, perm), edge_keys(graph))  # same edges after mapping back
    perm_t = torch.from_numpy(perm)
    for name in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(new, name), getattr(graph, name)[perm_t]), name


def test_random_is_seeded_and_node_balanced(cora):
    a = partition_nodes(cora, 3, "random", seed=7)
    assert np.array_equal(a, partition_nodes(cora, 3, "random", seed=7))
    assert not np.array_equal(a, partition_nodes(cora, 3, "random", seed=8))
    counts = np.bincount(a, minlength=3)
    assert counts.max() - counts.min() <= 1


def test_contiguous_keeps_input_order(cora):
    parts = partition_nodes(cora, 4, "contiguous")
    assert (np.diff(parts) >= 0).all()
    counts = np.bincount(parts)
    assert counts.max() - counts.min() <= 1


def test_balanced_balances_edges_better_than_contiguous():
    graph = skewed_graph()
    quality = {}
    for method in ("contiguous", "balanced"):
        new, _, ranges = relabel(graph, partition_nodes(graph, 4, method), 4)
        quality[method] = partition_quality(new, ranges)
    assert (np.diff(partition_nodes(graph, 4, "balanced")) >= 0).all()  # still contiguous ranges
    assert quality["contiguous"].edge_balance > 2.0
    assert quality["balanced"].edge_balance < 1.15
    assert quality["balanced"].edge_balance < quality["contiguous"].edge_balance


def test_balanced_never_leaves_a_part_empty():
    graph = skewed_graph(n=12)
    parts = partition_nodes(graph, 8, "balanced")
    assert np.array_equal(np.unique(parts), np.arange(8))


def test_metis_cuts_fewer_edges_than_random_on_cora(cora):
    cut = {}
    for method in ("metis", "random"):
        new, _, ranges = relabel(cora, partition_nodes(cora, 4, method, seed=0), 4)
        quality = partition_quality(new, ranges)
        cut[method] = quality.edge_cut_pct
        if method == "metis":
            assert quality.node_balance < 1.05
    assert cut["metis"] < cut["random"] / 4


def test_symmetric_adjacency_matches_a_set_construction(rmat):
    xadj, adjncy = symmetric_adjacency(rmat)
    n = rmat.num_nodes
    dst = np.repeat(np.arange(n), rmat.in_degrees().numpy())
    src = rmat.col.numpy()
    expected = {(int(u), int(v)) for u, v in zip(src, dst) if u != v}
    expected |= {(v, u) for u, v in expected}
    rows = np.repeat(np.arange(n), np.diff(xadj))
    got = list(zip(rows.tolist(), adjncy.tolist()))
    assert len(got) == len(set(got))  # no duplicates
    assert set(got) == expected  # symmetric, no self loops
    assert xadj[0] == 0 and xadj[-1] == adjncy.size


@pytest.mark.parametrize("method", ["metis", "random"])
def test_halo_and_quality_match_brute_force(rmat, method):
    new, _, ranges = relabel(rmat, partition_nodes(rmat, 4, method, seed=2), 4)
    quality = partition_quality(new, ranges)
    n = new.num_nodes
    owner = np.repeat(np.arange(4), ranges[:, 1] - ranges[:, 0])  # [N] part of each relabelled id
    dst = np.repeat(np.arange(n), new.in_degrees().numpy())
    src = new.col.numpy()
    assert quality.cut_edges == sum(int(owner[s] != owner[d]) for s, d in zip(src, dst))
    for r, (start, end) in enumerate(ranges):
        expected = sorted({int(s) for s, d in zip(src, dst) if owner[d] == r and owner[s] != r})
        halo = halo_ids(new.rows(start, end)[1].numpy(), start, end)
        assert halo.dtype == np.int32
        assert halo.tolist() == expected
        assert quality.halo_sizes[r] == len(expected)
        assert quality.part_edges[r] == sum(int(owner[d] == r) for d in dst)
    assert quality.part_nodes == (ranges[:, 1] - ranges[:, 0]).tolist()


def test_quality_figures():
    # 4 nodes, part 0 = {0, 1}, part 1 = {2, 3}; edges 0->1, 2->1, 3->1, 2->3
    graph = Graph.from_edges(
        [0, 2, 3, 2],
        [1, 1, 1, 3],
        x=np.zeros((4, 1)),
        y=np.zeros(4),
        train_mask=np.zeros(4),
        val_mask=np.zeros(4),
        test_mask=np.zeros(4),
        num_nodes=4,
    )
    quality = partition_quality(graph, np.array([[0, 2], [2, 4]]))
    assert quality.cut_edges == 2 and quality.edge_cut_pct == 50.0
    assert quality.part_edges == [3, 1] and quality.edge_balance == 1.5
    assert quality.halo_sizes == [2, 0] and quality.node_balance == 1.0


def test_bad_requests_raise_value_errors(cora):
    with pytest.raises(ValueError, match="unknown partition method 'kway'"):
        partition_nodes(cora, 2, "kway")
    with pytest.raises(ValueError, match="into 5000 parts"):
        partition_nodes(cora, 5000, "random")
    with pytest.raises(ValueError, match="num_parts is 2"):
        relabel(cora, np.full(cora.num_nodes, 3), 2)


def test_metis_edge_balance_evens_out_in_edges_on_a_power_law_graph():
    graph = load_dataset("rmat:12", seed=0)
    quality = {}
    for balance in ("nodes", "edges"):
        parts = partition_nodes(graph, 4, "metis", seed=0, metis_balance=balance)
        new, _, ranges = relabel(graph, parts, 4)
        quality[balance] = partition_quality(new, ranges)
    assert quality["nodes"].node_balance < 1.05 and quality["nodes"].edge_balance > 1.5
    assert quality["edges"].edge_balance < 1.1
    with pytest.raises(ValueError, match="unknown metis_balance 'heads'"):
        partition_nodes(graph, 2, "metis", metis_balance="heads")
