"""Graph construction and .npz loading: structure, and a clear error for each kind of bad input."""

import numpy as np
import pytest
import torch

from dsgraph.graph import Graph, load_dataset, load_npz, rmat_graph, save_npz
from tests.graphs import random_graph


def _arrays(n=5):
    return dict(
        src=np.array([0, 1, 2, 3]),
        dst=np.array([1, 2, 3, 1]),
        x=np.ones((n, 3), np.float32),
        y=np.zeros(n, np.int64),
        train_mask=np.ones(n, bool),
        val_mask=np.zeros(n, bool),
        test_mask=np.zeros(n, bool),
    )


def test_csr_by_destination():
    a = _arrays()
    g = Graph.from_edges(a.pop("src"), a.pop("dst"), **a)
    assert g.rowptr.tolist() == [0, 0, 2, 3, 4, 4]
    assert g.col.dtype == torch.int32 and g.rows(1, 2)[1].tolist() == [0, 3]


def test_self_loops_added_once():
    g = random_graph().with_self_loops()
    deg = g.in_degrees()
    assert bool((deg >= 1).all())
    for i in (0, 5, 50):
        row = g.col[g.rowptr[i] : g.rowptr[i + 1]].tolist()
        assert row.count(i) == 1 and row == sorted(row)


def test_cora_is_bundled():
    g = load_dataset("cora")
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (2708, 10556, 1433, 7)
    assert int(g.train_mask.sum()) == 140 and int(g.test_mask.sum()) == 1000


def test_rmat_is_deterministic_power_law_and_learnable_shape():
    a, b = rmat_graph("rmat:10", seed=1), rmat_graph("rmat:10", seed=1)
    assert torch.equal(a.col, b.col) and torch.equal(a.x, b.x)
    assert not torch.equal(a.col, rmat_graph("rmat:10", seed=2).col)
    deg = a.in_degrees().float()
    assert a.num_nodes == 1024 and deg.max() > 10 * deg.mean()  # heavy tail
    assert a.num_classes == 4
    # planted communities: more edges inside a class than a random pairing would give
    dst = torch.repeat_interleave(torch.arange(a.num_nodes), a.in_degrees())
    same = (a.y[dst] == a.y[a.col.long()]).float().mean()
    assert same > 0.3


def test_structural_rmat_has_two_imbalanced_classes_and_structural_features():
    from dsgraph.graph.rmat import MINORITY_SHARE, NUM_STRUCTURAL, structural_features

    g, plain = rmat_graph("rmat:10:8:structural", seed=1), rmat_graph("rmat:10:8", seed=1)
    assert torch.equal(g.col, plain.col) and torch.equal(g.train_mask, plain.train_mask)  # the same graph and split
    assert g.num_classes == 2 and int(g.y.sum()) == round(MINORITY_SHARE * 1024) and g.x.shape == (1024, NUM_STRUCTURAL)
    dst = torch.repeat_interleave(torch.arange(g.num_nodes), g.in_degrees())
    minority_edges = g.y[dst] == 1
    assert (g.y[g.col.long()][minority_edges] == 1).float().mean() > 2 * MINORITY_SHARE  # they link among themselves
    # against a direct count on a small directed graph: 0->1, 1->0, 2->1, 1->2 is absent, 3 isolated
    x = structural_features(np.array([0, 1, 2]), np.array([1, 0, 1]), 4)
    ln = np.log1p
    want = [
        [ln(1), ln(1), ln(2), ln(2), ln(2), ln(2), 1.0],
        [ln(2), ln(1), ln(1) / 2, ln(1), ln(1), ln(1), 0.5],
        [0, ln(1), 0, 0, ln(2), 0, 0],
        [0] * 7,
    ]
    np.testing.assert_allclose(x, np.array(want, dtype=np.float32), rtol=1e-6)
    with pytest.raises(ValueError, match="rmat:SCALE"):
        load_dataset("rmat:10:structurals")


def test_save_and_load_round_trip(tmp_path):
    g = random_graph()
    save_npz(g, tmp_path / "g.npz")
    h = load_npz(tmp_path / "g.npz")
    for name in ("rowptr", "col", "x", "y", "train_mask"):
        assert torch.equal(getattr(g, name), getattr(h, name))


def _write(tmp_path, **changes):
    a = _arrays()
    a.update(changes)
    a = {k: v for k, v in a.items() if v is not None}
    path = tmp_path / "bad.npz"
    np.savez(path, **a)
    return path


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(src=np.array([0, 1, 9, 3])), r"edge index out of range in 'src' at position 2: 9 is not in \[0, 5\)"),
        (dict(dst=np.array([0, -1, 2, 3])), r"edge index out of range in 'dst'"),
        (dict(x=np.array([[0, 1, np.nan]] * 5, np.float32)), r"features 'x' contain NaN or Inf"),
        (dict(y=np.zeros(4, np.int64)), r"array 'y' has 4 rows but the graph has 5 nodes"),
        (dict(dst=np.array([1, 2, 3])), r"'src' has 4 entries but 'dst' has 3"),
        (dict(test_mask=None), r"missing array\(s\) test_mask"),
    ],
)
def test_bad_npz_gives_clear_error(tmp_path, changes, message):
    path = _write(tmp_path, **changes)
    with pytest.raises(ValueError, match=message) as err:
        load_npz(path)
    assert str(path) in str(err.value)


def test_unknown_dataset_and_missing_file():
    with pytest.raises(ValueError, match="expected one of cora"):
        load_dataset("citeseer")
    with pytest.raises(FileNotFoundError, match="no such dataset file"):
        load_dataset("/nonexistent/graph.npz")
    with pytest.raises(ValueError, match="rmat:SCALE"):
        load_dataset("rmat:x")


def test_cached_dataset_generates_a_synthetic_graph_once(tmp_path, monkeypatch):
    from dsgraph.graph.datasets import cached_dataset

    monkeypatch.setenv("DSGRAPH_CACHE", str(tmp_path))
    path = cached_dataset("rmat:8", seed=3)
    stamp = (tmp_path / path).stat().st_mtime_ns
    assert cached_dataset("rmat:8", seed=3) == path and (tmp_path / path).stat().st_mtime_ns == stamp
    cached, fresh = load_npz(path), rmat_graph("rmat:8", seed=3)
    assert torch.equal(cached.rowptr, fresh.rowptr) and torch.equal(cached.col, fresh.col)
    assert cached_dataset("cora").endswith("cora.npz")
