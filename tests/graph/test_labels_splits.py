"""Labels and split masks are checked for the task; [S, N] masks and the benchmark layout are read."""

import os

import numpy as np
import pytest

from dsgraph.graph import load_npz
from dsgraph.graph.convert import main as convert_main
from dsgraph.graph.label_checks import SplitChoice
from dsgraph.graph.rank_reader import DatasetFile

HETERO = "/work/shared/datasets/heterophilous"


def _arrays(n=20, splits=None, seed=0):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, 60), rng.integers(0, n, 60)
    part = rng.integers(0, 3, (splits or 1, n))
    masks = {name: part == i for i, name in enumerate(("train_mask", "val_mask", "test_mask"))}
    if splits is None:
        masks = {k: v[0] for k, v in masks.items()}
    return dict(src=src, dst=dst, x=rng.standard_normal((n, 4)).astype(np.float32), y=rng.integers(0, 3, n), **masks)


def _save(tmp_path, name, **arrays):
    path = str(tmp_path / name)
    np.savez(path, **arrays)
    return path


def test_float_labels_holding_non_integers_are_refused(tmp_path):
    a = _arrays()
    path = _save(tmp_path, "half.npz", **{**a, "y": a["y"] + 0.5})
    with pytest.raises(
        ValueError, match=r"half.npz: labels 'y' are float64 and node 0 holds .*\.5, which is not a class id"
    ):
        load_npz(path)
    with pytest.raises(ValueError, match="half.npz: labels 'y'"):
        DatasetFile(path)
    ok = _save(tmp_path, "whole.npz", **{**a, "y": a["y"].astype(float)})
    assert load_npz(ok).y.tolist() == a["y"].tolist()


def test_overlapping_splits_are_refused_with_counts_unless_allowed(tmp_path):
    a = _arrays()
    path = _save(tmp_path, "same.npz", **{**a, "test_mask": a["train_mask"]})
    count = int(a["train_mask"].sum())
    with pytest.raises(
        ValueError,
        match=rf"same.npz: train/val/test overlap \(train_mask & test_mask: {count} node\(s\)"
        r".*allow_overlapping_splits",
    ):
        load_npz(path)
    with pytest.raises(ValueError, match="overlap"):
        DatasetFile(path)
    graph = load_npz(path, choice=SplitChoice(allow_overlap=True))
    assert graph.test_mask.tolist() == a["train_mask"].tolist()


def test_masks_of_several_splits_pick_one(tmp_path):
    a = _arrays(splits=4)
    path = _save(tmp_path, "four.npz", **a)
    for k in range(4):
        graph = load_npz(path, choice=SplitChoice(split=k))
        assert graph.val_mask.tolist() == a["val_mask"][k].tolist()
        assert DatasetFile(path, choice=SplitChoice(split=k)).arrays["test_mask"].tolist() == a["test_mask"][k].tolist()
    with pytest.raises(
        ValueError, match=r"four.npz: array 'train_mask' holds 4 splits .*'split' must be in 0..3, got 4"
    ):
        load_npz(path, choice=SplitChoice(split=4))
    one = _save(tmp_path, "one.npz", **_arrays())
    with pytest.raises(ValueError, match=r"one.npz: array 'train_mask' holds one split"):
        load_npz(one, choice=SplitChoice(split=1))


def _benchmark(a):
    pairs = np.unique(np.sort(np.stack([a["src"], a["dst"]], 1), axis=1), axis=0)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return pairs, dict(
        edges=pairs,
        node_features=a["x"],
        node_labels=a["y"],
        train_masks=a["train_mask"],
        val_masks=a["val_mask"],
        test_masks=a["test_mask"],
    )


def test_benchmark_layout_reads_both_directions_and_converts(tmp_path):
    a = _arrays(splits=3)
    pairs, bench = _benchmark(a)
    path = _save(tmp_path, "bench.npz", **bench)
    mine = _save(
        tmp_path,
        "mine.npz",
        src=np.r_[pairs[:, 0], pairs[:, 1]],
        dst=np.r_[pairs[:, 1], pairs[:, 0]],
        x=a["x"],
        y=a["y"],
        train_mask=a["train_mask"],
        val_mask=a["val_mask"],
        test_mask=a["test_mask"],
    )
    got, want = load_npz(path, choice=SplitChoice(split=2)), load_npz(mine, choice=SplitChoice(split=2))
    assert got.num_edges == 2 * len(pairs)
    for name in ("rowptr", "col", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert getattr(got, name).tolist() == getattr(want, name).tolist(), name
    out = str(tmp_path / "converted.npz")
    assert convert_main([path, out]) == 0
    with np.load(out) as converted:
        assert converted["train_mask"].shape == (3, 20)
        assert converted["test_mask"].tolist() == a["test_mask"].tolist()
    assert load_npz(out, choice=SplitChoice(split=1)).rowptr.tolist() == load_npz(path).rowptr.tolist()


def test_bad_benchmark_edges_name_the_array(tmp_path):
    a = _arrays()
    _, bench = _benchmark(a)
    path = _save(tmp_path, "bad.npz", **{**bench, "edges": bench["edges"][:, :1]})
    with pytest.raises(ValueError, match=r"bad.npz: array 'edges' must be \[E, 2\]"):
        load_npz(path)
    path = _save(tmp_path, "far.npz", **{**bench, "edges": bench["edges"] + 100})
    with pytest.raises(ValueError, match=r"far.npz: edge index out of range in 'edges'"):
        load_npz(path)


@pytest.mark.skipif(not os.path.isdir(HETERO), reason="shared heterophilous datasets not present")
def test_heterophilous_files_load_every_split():
    data = DatasetFile(os.path.join(HETERO, "chameleon_filtered.npz"), choice=SplitChoice(split=9))
    assert (data.num_nodes, data.splits, data.num_classes()) == (890, 10, 5)
    assert sum(d.size for _, _, d, _ in data.chunks()) == 2 * 8854
