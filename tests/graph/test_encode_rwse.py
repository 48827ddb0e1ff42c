"""RWSE (``dsgraph/graph/encode/rwse.py``): exact return probabilities equal dense matrix powers on
small directed graphs (dead ends, self loops, multi-edges, isolated nodes), the random-walk
estimator's error stays within its stated bound, and its numbers depend only on (seed, node key)."""

import numpy as np
import pytest

from dsgraph.graph.encode.adjacency import from_edges
from dsgraph.graph.encode.rwse import choose_method, exact_rwse, rwse, walk_rwse
from dsgraph.graph.rmat import rmat_graph
from tests.graphs import random_graph


def dense_rwse(src, dst, n, steps):
    """diag((D_out^-1 A)^k), k = 1..steps, with dense matrices (a node without out-edges: zero row)."""
    a = np.zeros((n, n))
    np.add.at(a, (src, dst), 1.0)
    p = a / np.maximum(a.sum(1), 1.0)[:, None]
    out, power = [], np.eye(n)
    for _ in range(steps):
        power = power @ p
        out.append(np.diag(power).copy())
    return np.stack(out, axis=1)


def edges_of(graph):
    return graph.col.numpy().astype(np.int64), np.repeat(np.arange(graph.num_nodes), graph.in_degrees().numpy())


def awkward_graph():
    """Directed: a 3-cycle with a self loop and a doubled edge, a dead end, a pair, isolated nodes."""
    src = np.array([0, 1, 2, 2, 0, 0, 3, 5, 6, 4, 4])
    dst = np.array([1, 2, 0, 0, 0, 3, 4, 6, 5, 4, 0])
    return src, dst, 10  # nodes 7, 8, 9 have no edges; node 3 -> 4 and 4 loops


@pytest.mark.parametrize("case", ["awkward", "random", "rmat"])
def test_exact_rwse_equals_dense_matrix_powers(case):
    if case == "awkward":
        src, dst, n = awkward_graph()
    else:
        graph = random_graph() if case == "random" else rmat_graph("rmat:8:4", seed=1)
        (src, dst), n = edges_of(graph), graph.num_nodes
    got = exact_rwse(from_edges(src, dst, n), 12)
    want = dense_rwse(src, dst, n, 12)
    assert got.dtype == np.float32 and got.shape == (n, 12)
    np.testing.assert_allclose(got, want, atol=1e-6)
    if case == "awkward":
        assert got[0, 0] == pytest.approx(1 / 3) and got[4, 0] == pytest.approx(1 / 2) and not got[7:].any()


def test_walk_estimator_error_is_within_its_bound():
    graph = rmat_graph("rmat:10:8", seed=2)
    (src, dst), n = edges_of(graph), graph.num_nodes
    adj = from_edges(src, dst, n)
    exact = exact_rwse(adj, 16)
    for walks in (64, 256):
        estimate = walk_rwse(adj, 16, walks=walks, seed=0)
        error = np.abs(estimate - exact)
        assert np.array_equal(estimate[:, 0], exact[:, 0])  # step 1 is exact: P[u, u]
        assert error.max() <= 1 / (2 * np.sqrt(walks))  # one standard error of the worst case (p = 1/2)
        assert error.mean() <= 0.02 / np.sqrt(walks)
    src2, dst2, n2 = awkward_graph()
    adj2 = from_edges(src2, dst2, n2)
    np.testing.assert_allclose(walk_rwse(adj2, 6, walks=20000), exact_rwse(adj2, 6), atol=0.02)


def test_walk_estimate_depends_only_on_seed_and_node_key():
    graph = random_graph()
    (src, dst), n = edges_of(graph), graph.num_nodes
    adj = from_edges(src, dst, n)
    first = walk_rwse(adj, 8, walks=32, seed=5)
    assert np.array_equal(first, walk_rwse(adj, 8, walks=32, seed=5))
    assert not np.array_equal(first, walk_rwse(adj, 8, walks=32, seed=6))
    keyed = from_edges(src, dst, n, node_keys=np.arange(n) + 1000)
    assert not np.array_equal(first[:, 1:], walk_rwse(keyed, 8, walks=32, seed=5)[:, 1:])


def test_auto_method_is_exact_within_the_work_budget():
    src, dst, n = awkward_graph()
    adj = from_edges(src, dst, n)
    assert choose_method(adj, 16) == "exact"
    assert choose_method(adj, 16, max_exact_work=16 * adj.num_edges * n - 1) == "walks"
    values, method = rwse(adj, 4, method="walks", walks=8)
    assert method == "walks" and values.shape == (n, 4)
    with pytest.raises(ValueError, match="RWSE method"):
        choose_method(adj, 4, "dense")
    with pytest.raises(ValueError, match="K >= 1"):
        rwse(adj, 0)
