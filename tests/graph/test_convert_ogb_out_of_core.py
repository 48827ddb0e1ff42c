"""``dsgraph convert`` of an OGB folder out of core (``convert_stream.convert_ogb_streamed``): the
same graph, features, labels and split as the in-memory reader, a partition store from it, the
automatic choice, the refusals, and memory that grows with neither the edges nor the features."""

import gzip
import os

import numpy as np
import pytest

from dsgraph.graph.convert import main
from dsgraph.graph.npz import load_npz
from dsgraph.graph.store import read_meta
from tests.graph.anon_memory import grown_kb


def _write(path, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as f:
        f.write(text)


def ogb_folder(root, n: int, e: int, *, width: int = 3, seed: int = 0, gz: bool = True) -> str:
    """An OGB node-property folder of ``n`` nodes, ``e`` random edges (repeats and self loops
    included), ``width`` features, labels (one unlabelled node) and a split; the last node has no edge."""
    rng = np.random.default_rng(seed)
    root, ext = str(root), ".csv.gz" if gz else ".csv"
    pairs = rng.integers(0, n - 1, size=(e, 2))
    _write(f"{root}/raw/num-node-list{ext}", f"{n}\n")
    _write(f"{root}/raw/edge{ext}", "".join(f"{u},{v}\n" for u, v in pairs.tolist()))
    features = rng.integers(-50, 50, size=(n, width)) / 4
    _write(f"{root}/raw/node-feat{ext}", "".join(",".join(map(str, row)) + "\n" for row in features.tolist()))
    labels = rng.integers(0, 4, size=n).astype(str)
    labels[1] = "nan"
    _write(f"{root}/raw/node-label{ext}", "\n".join(labels) + "\n")
    order = rng.permutation(n)
    order = order[order != 1]  # the unlabelled node is in no split
    for stem, ids in (("train", order[: n // 2]), ("valid", order[n // 2 : 3 * n // 4]), ("test", order[3 * n // 4 :])):
        _write(f"{root}/split/random/{stem}{ext}", "".join(f"{i}\n" for i in ids))
    return root


@pytest.mark.parametrize("flags", [[], ["--symmetrize", "--dedup", "--drop-self-loops"]])
def test_streamed_ogb_equals_the_in_memory_conversion(tmp_path, flags, capsys):
    root = ogb_folder(tmp_path / "ogbn_small", 200, 3000)
    memory, streamed = str(tmp_path / "memory.npz"), str(tmp_path / "streamed.npz")
    assert main([root, memory, *flags]) == 0
    assert main([root, streamed, "--out-of-core", *flags]) == 0
    out = capsys.readouterr().out
    assert "converted out of core" in out and "split: random" in out
    a, b = load_npz(memory), load_npz(streamed)
    assert a.num_nodes == b.num_nodes == 200 and bool((a.rowptr == b.rowptr).all())
    assert int(a.rowptr[-1] - a.rowptr[-2]) == 0  # the node without edges is kept (N from num-node-list)
    for row in range(a.num_nodes):  # the same in-edges per row (the streamed rows are sorted by source)
        lo, hi = int(a.rowptr[row]), int(a.rowptr[row + 1])
        assert sorted(a.col[lo:hi].tolist()) == b.col[lo:hi].tolist()
    for name in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert bool((getattr(a, name) == getattr(b, name)).all()), name
    assert b.x.shape == (200, 3) and int(b.y[1]) == -1


def test_ogb_store_out_of_core_is_balanced_ranges(tmp_path, capsys):
    root = ogb_folder(tmp_path / "ogbn_small", 300, 4000, seed=1, gz=False)
    store = str(tmp_path / "store")
    assert main([root, store, "--out-of-core", "--dedup", "--parts", "2"]) == 0
    meta = read_meta(store)
    assert meta["num_parts"] == 2 and meta["method"] == "balanced" and meta["num_nodes"] == 300
    assert meta["dataset"] == "ogbn_small"
    whole = str(tmp_path / "whole.npz")
    assert main([root, whole, "--dedup"]) == 0
    assert meta["num_edges"] == load_npz(whole).num_edges
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".") or f.startswith("dsgraph-runs")]


def test_ogb_chosen_by_itself_over_the_budget_and_refusals(tmp_path, capsys):
    root = ogb_folder(tmp_path / "ogbn_small", 100, 500)
    assert main([root, str(tmp_path / "a.npz"), "--memory-gb", "0.00001"]) == 0
    assert "over the budget of 0.0 GB (--memory-gb): converting out of core" in capsys.readouterr().out
    assert main([root, str(tmp_path / "b.npz"), "--out-of-core", "--labels", "y.npy"]) == 1
    assert "--labels apply to edge lists only" in capsys.readouterr().err
    _write(f"{root}/raw/edge-feat.csv.gz", "1.0\n" * 500)
    assert main([root, str(tmp_path / "c.npz"), "--out-of-core"]) == 1
    assert "edge features are not carried out of core" in capsys.readouterr().err
    assert main([root, str(tmp_path / "c.npz")]) == 0  # in memory they are
    os.remove(f"{root}/raw/edge-feat.csv.gz")
    _write(f"{root}/split/random/test.csv.gz", "1\n")
    assert main([root, str(tmp_path / "d.npz"), "--out-of-core"]) == 1
    assert "'test_mask' selects a node whose label is -1 (unlabelled)" in capsys.readouterr().err
    _write(f"{root}/raw/edge.csv.gz", "0,1\n1,100\n")
    assert main([root, str(tmp_path / "d.npz"), "--out-of-core"]) == 1
    err = capsys.readouterr().err
    assert "edge.csv.gz, line 2: node id 100 is outside [0, 100) (the node count of the dataset)" in err


IMPORTS = """
from dsgraph.graph.convert_stream import Bounds, convert_ogb_streamed
import dsgraph.graph.ogb  # imported before the first sample: its import is no part of the data
"""
WORK = """
small = Bounds(block_bytes=1 << 18, batch_keys=1 << 16, merge_window=1 << 10, chunk=1 << 16)
stats, _ = convert_ogb_streamed(sys.argv[1], sys.argv[2], dedup=True, bounds=small)
"""


@pytest.mark.slow
def test_ogb_memory_grows_with_neither_edges_nor_features(tmp_path):
    """4M edges (32 MB as int32 pairs) and 65,536 x 64 features (16 MB as float32, 32 MB parsed as
    float64): with small bounds the conversion's anonymous memory grows by less than half the
    features and a quarter of the edges."""
    n, e, width = 1 << 16, 4_000_000, 64
    root = ogb_folder(tmp_path / "ogbn_big", n, e, width=width, seed=2, gz=False)
    grown = grown_kb(IMPORTS, WORK, root, str(tmp_path / "out.npz"))
    assert grown["edges"] > 0.9 * e
    assert grown["grew_kb"] * 1024 < min(e * 8 / 4, n * width * 4 / 2), grown
    graph = load_npz(str(tmp_path / "out.npz"))
    assert graph.x.shape == (n, width)
