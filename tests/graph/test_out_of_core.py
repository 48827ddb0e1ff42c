"""Graphs built out of core: chunked R-MAT generation, the external sort, the streamed store, the cache lock."""

import fcntl
import os
import threading
import time
import tracemalloc

import numpy as np
import pytest
import torch

from dsgraph.graph import datasets, external_sort, rmat_stream, store
from dsgraph.graph.external_sort import SortedRuns, merge_sorted
from dsgraph.graph.npz import load_npz
from dsgraph.graph.partition import partition_nodes, partition_quality, relabel
from dsgraph.graph.partition_cli import main as partition_main
from dsgraph.graph.store import load_store_graph, write_store
from dsgraph.graph.store_stream import write_store_streamed


@pytest.fixture
def small_blocks(monkeypatch):
    """Logical blocks small enough that a test graph has many of them."""
    monkeypatch.setattr(rmat_stream, "BLOCK_EDGES", 1 << 10)
    monkeypatch.setattr(rmat_stream, "NODE_BLOCK", 1 << 8)


def _arrays(path):
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


def test_the_same_seed_gives_the_same_graph_whatever_the_chunk_size(tmp_path, small_blocks):
    files = []
    for chunk in (1 << 10, 3 << 10, 1 << 16):
        rmat_stream.write_rmat_npz("rmat:10", 5, tmp_path / f"c{chunk}.npz", chunk_edges=chunk)
        files.append(_arrays(tmp_path / f"c{chunk}.npz"))
    for other in files[1:]:
        assert other.keys() == files[0].keys()
        for name in files[0]:
            assert np.array_equal(other[name], files[0][name]), name
    rmat_stream.write_rmat_npz("rmat:10", 6, tmp_path / "seed6.npz")
    assert not np.array_equal(_arrays(tmp_path / "seed6.npz")["src"], files[0]["src"])


def test_the_streamed_graph_is_every_distinct_permuted_edge_in_csr_order(tmp_path, small_blocks):
    scale, seed = 9, 2
    num = rmat_stream.write_rmat_npz(f"rmat:{scale}:8", seed, tmp_path / "g.npz", chunk_edges=2 << 10)
    got = _arrays(tmp_path / "g.npz")
    perm, total = rmat_stream.permutation(scale, seed), 8 << scale
    blocks = [
        rmat_stream.block_edges(scale, seed, b, min(1 << 10, total - (b << 10))) for b in range(-(-total // (1 << 10)))
    ]
    src, dst = np.concatenate([s for s, _ in blocks]), np.concatenate([d for _, d in blocks])
    keep = src != dst
    keys = np.unique(perm[dst[keep]].astype(np.int64) << scale | perm[src[keep]])
    assert num == keys.size and got["src"].dtype == np.int32 and got["dst"].dtype == np.int32
    assert np.array_equal(got["dst"], keys >> scale) and np.array_equal(got["src"], keys & ((1 << scale) - 1))
    graph = load_npz(tmp_path / "g.npz")
    assert graph.num_nodes == 1 << scale and graph.num_classes == 4 and graph.x.shape == (1 << scale, 64)
    assert int(graph.train_mask.sum() + graph.val_mask.sum() + graph.test_mask.sum()) == 1 << scale


@pytest.mark.parametrize("dedup", [True, False])
def test_the_external_merge_equals_a_sort_in_memory(tmp_path, dedup):
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 5000, size=int(rng.integers(0, 3000))) for _ in range(7)]
    with SortedRuns(str(tmp_path)) as runs:
        for batch in batches:
            runs.add(batch.copy(), dedup=dedup)
        merged = np.concatenate(list(runs.merge(dedup=dedup, window=97)))
        folder = runs.folder
    everything = np.concatenate(batches)
    assert np.array_equal(merged, np.unique(everything) if dedup else np.sort(everything))
    assert not os.path.exists(folder)
    assert np.array_equal(
        np.concatenate(list(merge_sorted([np.arange(5), np.arange(3)], window=1))), [0, 0, 1, 1] + [2, 2, 3, 4]
    )
    with pytest.raises(ValueError, match="int64"):
        SortedRuns(str(tmp_path)).add(np.zeros(3, np.int32))


@pytest.mark.parametrize("method", ["balanced", "contiguous"])
def test_the_streamed_store_equals_the_store_written_in_memory(tmp_path, small_blocks, method):
    rmat_stream.write_rmat_npz("rmat:10", 1, tmp_path / "g.npz")
    meta, quality = write_store_streamed(
        str(tmp_path / "g.npz"),
        3,
        method,
        str(tmp_path / "streamed"),
        scratch=str(tmp_path),
        dataset="g",
        chunk_edges=999,
    )
    graph = load_npz(tmp_path / "g.npz")
    relabelled, perm, ranges = relabel(graph, partition_nodes(graph, 3, method), 3)
    expected = write_store(relabelled, perm, ranges, tmp_path / "memory", method, dataset="g")
    assert meta["sha256"] == expected["sha256"] and meta["node_ranges"] == expected["node_ranges"]
    assert quality.as_dict() == partition_quality(relabelled, ranges).as_dict()


def test_an_edge_list_out_of_csr_order_is_sorted_on_disk(tmp_path, small_blocks):
    rmat_stream.write_rmat_npz("rmat:9", 3, tmp_path / "g.npz")
    arrays = _arrays(tmp_path / "g.npz")
    order = np.random.default_rng(1).permutation(arrays["src"].size)
    np.savez(tmp_path / "shuffled.npz", **{**arrays, "src": arrays["src"][order], "dst": arrays["dst"][order]})
    write_store_streamed(
        str(tmp_path / "shuffled.npz"),
        2,
        "balanced",
        str(tmp_path / "s"),
        scratch=str(tmp_path),
        dataset="s",
        chunk_edges=1000,
    )
    stored, original = load_store_graph(tmp_path / "s"), load_npz(tmp_path / "g.npz")
    assert torch.equal(stored.rowptr, original.rowptr) and torch.equal(stored.col, original.col)
    assert sorted(os.listdir(tmp_path)) == ["g.npz", "s", "shuffled.npz"]  # no scratch left behind


def test_the_store_is_built_without_the_whole_graph_in_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(rmat_stream, "BLOCK_EDGES", 1 << 12)
    monkeypatch.setattr(rmat_stream, "NODE_BLOCK", 1 << 10)
    monkeypatch.setattr(external_sort, "MERGE_KEYS", 1 << 14)
    monkeypatch.setattr(external_sort, "MIN_WINDOW", 1 << 8)
    monkeypatch.setattr(store, "HASH_CHUNK", 1 << 16)  # the checksums' fixed read buffer
    tracemalloc.start()
    try:
        num_edges = rmat_stream.write_rmat_npz("rmat:12:128", 0, tmp_path / "g.npz", chunk_edges=1 << 14)
        write_store_streamed(
            str(tmp_path / "g.npz"),
            2,
            "balanced",
            str(tmp_path / "s"),
            scratch=str(tmp_path),
            dataset="g",
            chunk_edges=1 << 14,
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    graph_bytes = num_edges * 8 + (1 << 12) * 64 * 4  # the edge list as int32 pairs and the features
    assert peak < graph_bytes / 3, f"peak {peak} bytes for a graph of {graph_bytes} bytes"
    assert load_store_graph(tmp_path / "s").num_edges == num_edges


def test_out_of_core_refuses_what_it_cannot_carry(tmp_path):
    from dsgraph.graph.npz import save_npz
    from tests.graphs import random_graph

    graph = random_graph()
    save_npz(graph, tmp_path / "g.npz")
    with pytest.raises(ValueError, match="supports balanced, contiguous"):
        write_store_streamed(
            str(tmp_path / "g.npz"), 2, "metis", str(tmp_path / "s"), scratch=str(tmp_path), dataset="g"
        )


def test_partition_auto_uses_metis_where_the_graph_fits_and_streams_beyond(tmp_path, small_blocks, capsys):
    rmat_stream.write_rmat_npz("rmat:10", 0, tmp_path / "g.npz")
    assert (
        partition_main(["--dataset", str(tmp_path / "g.npz"), "--parts", "2", "--out", str(tmp_path / "m"), "--quiet"])
        == 0
    )
    assert "auto: metis in memory" in capsys.readouterr().out
    argv = ["--dataset", str(tmp_path / "g.npz"), "--parts", "2", "--out", str(tmp_path / "b"), "--quiet"]
    assert partition_main([*argv, "--memory-gb", "0.001"]) == 0
    assert "auto: balanced ranges out of core" in capsys.readouterr().out
    stored, original = load_store_graph(tmp_path / "b"), load_npz(tmp_path / "g.npz")
    assert torch.equal(stored.col, original.col) and torch.equal(stored.x, original.x)
    assert partition_main([*argv, "--memory-gb", "0", "--force"]) == 1
    assert "--memory-gb must be positive" in capsys.readouterr().err


def test_large_plain_rmat_specs_are_streamed_under_their_own_cache_name(tmp_path, monkeypatch):
    monkeypatch.setenv("DSGRAPH_CACHE", str(tmp_path))
    assert rmat_stream.streamed("rmat:21") and rmat_stream.streamed("rmat:20:32")
    assert not rmat_stream.streamed("rmat:20") and not rmat_stream.streamed("rmat:22:16:structural")
    assert not rmat_stream.streamed("rmat:22:labels=4") and not rmat_stream.streamed("rmat:22:regression")
    with pytest.raises(ValueError, match="only plain"):
        rmat_stream.write_rmat_npz("rmat:8:edge_types=3", 0, tmp_path / "g.npz")
    assert datasets.dataset_file("rmat:21")[0].endswith(f"_seed0_stream{rmat_stream.STREAM_VERSION}.npz")
    assert datasets.dataset_file("rmat:20")[0].endswith("_seed0_v1.npz")


def test_a_process_waits_on_the_cache_lock_while_another_builds(tmp_path, monkeypatch):
    monkeypatch.setenv("DSGRAPH_CACHE", str(tmp_path))
    monkeypatch.setattr(datasets, "LOCK_POLL_S", 0.02)
    path, _ = datasets.dataset_file("rmat:6", 1)
    beats, result = [], []
    with open(f"{path}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process is building
        waiter = threading.Thread(
            target=lambda: result.append(datasets.cached_dataset("rmat:6", 1, heartbeat=beats.append))
        )
        waiter.start()
        time.sleep(0.3)
        assert waiter.is_alive() and any("waiting for another process" in b for b in beats)
        datasets.write_synthetic("rmat:6", 1, path)
        built = os.stat(path).st_mtime_ns
        fcntl.flock(held, fcntl.LOCK_UN)
    waiter.join(timeout=30)
    assert result == [path] and os.stat(path).st_mtime_ns == built  # found, not built again


@pytest.mark.slow
def test_train_builds_the_synthetic_dataset_before_the_process_group(tmp_path, monkeypatch):
    from dsgraph.train.config import DsgraphConfig
    from dsgraph.train.main import build_dataset

    monkeypatch.setenv("DSGRAPH_CACHE", str(tmp_path))
    beats = []
    build_dataset(DsgraphConfig(dataset="rmat:6", seed=2), beats.append)
    path, built = datasets.dataset_file("rmat:6", 2)
    assert built and any("generating rmat:6" in b for b in beats)  # in a child process, beating
    build_dataset(DsgraphConfig(dataset="rmat:7", partitions=str(tmp_path / "store")), beats.append)
    assert not datasets.dataset_file("rmat:7")[1]  # a run from a partition store needs no dataset file
