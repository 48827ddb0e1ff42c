"""Edge splits of link tasks: the standard seeded 85/5/10 split, negatives that are no edges,
fixed OGB-style splits from a file, and the refusal of held-out edges among the training edges."""

import numpy as np
import pytest

from dsgraph.graph.link_data import edge_file, load_link_split, message_graph
from dsgraph.graph.link_split import LinkSplit, pair_keys, random_split, undirected_pairs, with_negatives


def _ring(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Both directions of a ring with chords, a self loop and a duplicate: 2n distinct undirected pairs."""
    u = np.arange(n)
    src = np.concatenate([u, (u + 1) % n, u, (u + 5) % n, [3, 0]])
    dst = np.concatenate([(u + 1) % n, u, (u + 5) % n, u, [3, 1]])
    return src, dst


def test_undirected_pairs_are_distinct_ordered_and_without_self_loops():
    pairs = undirected_pairs(*_ring(50), 50)
    assert pairs.shape == (100, 2) and (pairs[:, 0] < pairs[:, 1]).all()
    assert np.unique(pair_keys(pairs, 50)).size == 100


def test_random_split_sizes_disjointness_and_seed():
    pairs = undirected_pairs(*_ring(200), 200)
    split = random_split(pairs, 200, 0.05, 0.10, seed=4)
    pos = split.positives
    assert (pos["test"].shape[0], pos["val"].shape[0], pos["train"].shape[0]) == (
        40,
        20,
        340,
    )  # floor(400 x .1), floor(400 x .05)
    keys = {s: set(pair_keys(pos[s], 200).tolist()) for s in pos}
    assert not (keys["train"] & keys["val"]) and not (keys["train"] & keys["test"]) and not (keys["val"] & keys["test"])
    assert keys["train"] | keys["val"] | keys["test"] == set(pair_keys(pairs, 200).tolist())
    again = random_split(pairs, 200, 0.05, 0.10, seed=4)
    other = random_split(pairs, 200, 0.05, 0.10, seed=5)
    assert all(
        np.array_equal(again.positives[s], pos[s]) and np.array_equal(again.negatives[s], split.negatives[s])
        for s in pos
    )
    assert not np.array_equal(other.positives["test"], pos["test"])


def test_negatives_are_no_edges_distinct_and_one_per_positive():
    pairs = undirected_pairs(*_ring(100), 100)
    split = random_split(pairs, 100, 0.1, 0.1, seed=0)
    edges = set(pair_keys(pairs, 100).tolist())
    drawn = []
    for s in ("train", "val", "test"):
        neg = split.negatives[s]
        assert neg.shape == split.positives[s].shape and (neg[:, 0] != neg[:, 1]).all()
        keys = pair_keys(neg, 100).tolist()
        assert not edges & set(keys)
        drawn += keys
    assert len(set(drawn)) == len(drawn)  # no pair negative in two splits


def test_message_graph_holds_both_directions_of_training_edges_only():
    src, dst = _ring(60)
    pairs = undirected_pairs(src, dst, 60)
    split = random_split(pairs, 60, 0.1, 0.2, seed=1)
    graph = message_graph(np.ones((60, 3), np.float32), split, "ring")
    rows = np.repeat(np.arange(60), np.diff(graph.rowptr.numpy()))
    seen = set(zip(graph.col.numpy().tolist(), rows.tolist()))
    for u, v in split.positives["train"].tolist():
        assert (u, v) in seen and (v, u) in seen
    assert len(seen) == 2 * split.positives["train"].shape[0]
    for s in ("val", "test"):
        for u, v in split.positives[s].tolist():
            assert (u, v) not in seen and (v, u) not in seen


def test_a_held_out_edge_among_the_training_edges_is_refused():
    train = np.array([[0, 1], [1, 2], [2, 3]])
    with pytest.raises(ValueError, match="1 val edge"):
        with_negatives(10, {"train": train, "val": np.array([[2, 1]]), "test": np.array([[4, 5]])}, {}, 0).check(
            "f.npz"
        )


def _write(path, **arrays):
    np.savez(path, x=np.eye(12, dtype=np.float32), **arrays)
    return str(path)


def test_fixed_splits_with_shared_and_per_positive_negatives(tmp_path):
    train = np.array([[0, 1], [1, 2], [2, 3], [3, 4], [5, 6]])
    val, test = np.array([[0, 2], [7, 8]]), np.array([[1, 3], [4, 9], [10, 11]])
    path = _write(
        tmp_path / "fixed.npz",
        train_edges=train,
        val_edges=val,
        test_edges=test,
        val_neg_edges=np.array([[0, 9]]),
        test_neg_dst=np.array([[5, 6], [7, 8], [0, 1]]),
    )
    x, split = load_link_split(path, val_fraction=0.05, test_fraction=0.1, seed=0)
    assert x.shape == (12, 12) and np.array_equal(split.positives["val"], val)
    assert np.array_equal(split.negatives["val"], [[0, 9]]) and split.per_positive == {"test": 2}
    assert np.array_equal(split.negatives["test"], [[1, 5], [1, 6], [4, 7], [4, 8], [10, 0], [10, 1]])
    assert split.negatives["train"].shape == (5, 2)  # drawn: evaluation scores the training split too


def test_dataset_arrays_are_checked_by_name(tmp_path):
    with pytest.raises(ValueError, match="missing val_edges, test_edges"):
        load_link_split(
            _write(tmp_path / "a.npz", train_edges=np.array([[0, 1]])), val_fraction=0.1, test_fraction=0.1, seed=0
        )
    with pytest.raises(ValueError, match="'edges' must be"):
        load_link_split(_write(tmp_path / "b.npz", edges=np.arange(6)), val_fraction=0.1, test_fraction=0.1, seed=0)
    with pytest.raises(ValueError, match="needs edges"):
        load_link_split(_write(tmp_path / "c.npz"), val_fraction=0.1, test_fraction=0.1, seed=0)
    bad = _write(
        tmp_path / "d.npz", train_edges=np.array([[0, 1]]), val_edges=np.array([[0, 12]]), test_edges=np.array([[2, 3]])
    )
    with pytest.raises(ValueError, match="'val_edges' names a node outside"):
        load_link_split(bad, val_fraction=0.1, test_fraction=0.1, seed=0)
    with pytest.raises(ValueError, match="too small"):
        load_link_split(
            _write(tmp_path / "e.npz", src=np.array([0, 1]), dst=np.array([1, 2])),
            val_fraction=0.1,
            test_fraction=0.1,
            seed=0,
        )


def test_edge_files_to_score(tmp_path):
    pairs = np.array([[0, 1], [2, 3]])
    np.save(tmp_path / "e.npy", pairs)
    np.savez(tmp_path / "e.npz", edges=pairs)
    np.savez(tmp_path / "s.npz", src=pairs[:, 0], dst=pairs[:, 1])
    for name in ("e.npy", "e.npz", "s.npz"):
        assert np.array_equal(edge_file(str(tmp_path / name)), pairs)
    with pytest.raises(FileNotFoundError, match="no such edge file"):
        edge_file(str(tmp_path / "missing.npy"))
    np.save(tmp_path / "bad.npy", np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match=r"must be \[m, 2\]"):
        edge_file(str(tmp_path / "bad.npy"))


def test_split_check_reports_counts_that_do_not_match():
    split = LinkSplit(
        num_nodes=4,
        positives={"train": np.array([[0, 1]]), "val": np.array([[1, 2]]), "test": np.array([[2, 3]])},
        negatives={"train": np.array([[0, 2]]), "val": np.array([[0, 3]]), "test": np.array([[1, 3]])},
        per_positive={"test": 2},
    )
    with pytest.raises(ValueError, match="not 2 per positive"):
        split.check("f.npz")
