"""``dsgraph convert`` of an edge list or an OGB folder out of core (``dsgraph/graph/convert_stream.py``):
the same graph as the in-memory conversion, the store built from it, the automatic choice, the
refusals, and a conversion whose memory does not grow with the edges or the features (the anonymous
memory of a child process)."""

import os

import numpy as np
import pytest

from dsgraph.graph.convert import main
from dsgraph.graph.npz import load_npz
from dsgraph.graph.store import read_meta
from tests.graph.anon_memory import grown_kb

EDGES = "src dst\n5 1\n1 2\n2 5\n5 1\n3 3\n2 1\n"


def _edge_list(path, n, e, seed=0):
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, n, size=(e, 2))
    path.write_text("".join(f"{a} {b}\n" for a, b in pairs.tolist()))
    return str(path)


@pytest.mark.parametrize("flags", [[], ["--dedup"], ["--symmetrize", "--dedup", "--drop-self-loops"]])
def test_streamed_npz_equals_the_in_memory_conversion(tmp_path, flags, capsys):
    src = _edge_list(tmp_path / "g.txt", 300, 5000)
    memory, streamed = str(tmp_path / "memory.npz"), str(tmp_path / "streamed.npz")
    assert main([src, memory, *flags]) == 0
    assert main([src, streamed, "--out-of-core", *flags]) == 0
    assert "converted out of core" in capsys.readouterr().out
    a, b = load_npz(memory), load_npz(streamed)
    assert torch_equal(a.rowptr, b.rowptr) and a.num_nodes == b.num_nodes
    for row in range(a.num_nodes):  # the same in-edges per row (the streamed rows are sorted by source)
        lo, hi = int(a.rowptr[row]), int(a.rowptr[row + 1])
        assert sorted(a.col[lo:hi].tolist()) == b.col[lo:hi].tolist()
    assert torch_equal(a.x, b.x) and torch_equal(a.y, b.y)


def torch_equal(x, y) -> bool:
    return x.shape == y.shape and bool((x == y).all())


def test_cleanup_counts_header_and_given_features_and_labels(tmp_path, capsys):
    src = tmp_path / "g.txt"
    src.write_text(EDGES)
    np.save(tmp_path / "x.npy", np.arange(12, dtype=np.float32).reshape(6, 2))
    np.save(tmp_path / "y.npy", np.array([0, 1, 0, 1, 0, 1]))
    out = str(tmp_path / "g.npz")
    argv = [str(src), out, "--out-of-core", "--symmetrize", "--dedup", "--drop-self-loops"]
    assert main([*argv, "--features", str(tmp_path / "x.npy"), "--labels", str(tmp_path / "y.npy")]) == 0
    text = capsys.readouterr().out
    assert "read 6 edges; wrote 6 nodes and 6 edges" in text
    assert "1 self loops dropped, 5 reverse edges added, 4 repeated edges removed" in text
    assert "header skipped: src dst" in text
    g = load_npz(out)
    assert g.rowptr.tolist() == [0, 0, 2, 4, 4, 4, 6] and g.col.tolist() == [2, 5, 1, 5, 1, 2]
    assert g.x[5].tolist() == [10.0, 11.0] and g.y.tolist() == [0, 1, 0, 1, 0, 1]


def test_store_output_is_balanced_ranges_and_trains_the_same_graph(tmp_path, capsys):
    src = _edge_list(tmp_path / "g.txt", 500, 8000, seed=1)
    store = str(tmp_path / "store")
    assert main([src, store, "--out-of-core", "--dedup", "--parts", "2"]) == 0
    meta = read_meta(store)
    assert meta["num_parts"] == 2 and meta["method"] == "balanced" and meta["num_nodes"] == 500
    whole = str(tmp_path / "whole.npz")
    assert main([src, whole, "--dedup"]) == 0
    assert meta["num_edges"] == load_npz(whole).num_edges
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".converting.npz")]  # the scratch .npz is gone
    assert "wrote " + store in capsys.readouterr().out


def test_chosen_by_itself_over_the_budget_and_refusals(tmp_path, capsys):
    src = _edge_list(tmp_path / "g.txt", 100, 2000)
    assert main([src, str(tmp_path / "a.npz"), "--memory-gb", "0.0001"]) == 0
    assert "over the budget of 0.0 GB (--memory-gb): converting out of core" in capsys.readouterr().out
    assert main([src, str(tmp_path / "b.npz"), "--out-of-core", "--relabel"]) == 1
    assert "--relabel cannot be done (they need the edge list in memory)" in capsys.readouterr().err
    assert main([src, str(tmp_path / "store"), "--out-of-core", "--method", "metis"]) == 1
    assert "not --method metis" in capsys.readouterr().err
    np.savez(tmp_path / "in.npz", src=np.array([0]), dst=np.array([1]))
    assert main([str(tmp_path / "in.npz"), str(tmp_path / "c.npz"), "--out-of-core"]) == 1
    assert "--out-of-core converts edge lists" in capsys.readouterr().err
    (tmp_path / "bad.txt").write_text("1 2\n-4 5\n")
    assert main([str(tmp_path / "bad.txt"), str(tmp_path / "d.npz"), "--out-of-core"]) == 1
    assert "bad.txt, line 2: node id -4 is outside" in capsys.readouterr().err


IMPORTS = "from dsgraph.graph.convert_stream import Bounds, convert_edge_list_streamed"
WORK = """
small = Bounds(block_bytes=1 << 18, batch_keys=1 << 16, merge_window=1 << 12, chunk=1 << 16)
bounds = small if sys.argv[3] == "1" else None
stats = convert_edge_list_streamed(sys.argv[1], sys.argv[2], dedup=True, bounds=bounds)
"""


def _grown_kb(src, out, bounded: bool) -> dict:
    return grown_kb(IMPORTS, WORK, src, out, str(int(bounded)))


@pytest.mark.slow
def test_memory_does_not_grow_with_the_edges(tmp_path):
    """4M edges (64 MB as int64 keys): with small bounds the conversion's anonymous memory (what the
    process holds; the memory-mapped runs are page cache the kernel takes back) grows by far less
    than the edges; with the default bounds (a 64 MB batch) by more, so the measure tells them apart."""
    e = 4_000_000
    src = _edge_list(tmp_path / "big.txt", 1 << 16, e, seed=2)
    bounded = _grown_kb(src, str(tmp_path / "a.npz"), True)
    assert bounded["edges"] > 0.9 * e
    # an E-sized int32 pair alone is 32 MB; the bounded run grows by 7-8.5 MB (N-sized node arrays,
    # the merge's window per run, and numpy's 2 MB huge pages)
    assert bounded["grew_kb"] * 1024 < e * 8 / 3, bounded
    whole = _grown_kb(src, str(tmp_path / "b.npz"), False)
    assert whole["grew_kb"] * 1024 > e * 8, whole  # one batch holds every key
