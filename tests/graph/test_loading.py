"""Per-rank loading from the dataset file: each rank reads only its rows, and gets exactly what
splitting the whole graph in memory gives (CSR block, whole structure, node data), for every split
method, with and without self loops; bad files are named; synthetic graphs are cached once."""

import os

import numpy as np
import pytest
import torch

from dsgraph.comm import GraphParallelGroup
from dsgraph.graph import load_dataset, save_npz
from dsgraph.graph.file_loading import dataset_path, from_file
from dsgraph.graph.loading import from_graph
from dsgraph.graph.rank_reader import DatasetFile
from tests.graphs import random_graph


class RootFirstControl:
    """A stand-in control plane for ranks simulated in one process, rank 0 first: a broadcast
    returns what rank 0 sent; an allgather returns this rank's object only."""

    name, world_size = "stub", 1

    def __init__(self):
        self.rank, self.sent = 0, None

    def bcast(self, obj, root=0):
        self.sent = obj if obj is not None else self.sent
        return self.sent

    def allgather(self, obj):
        return [obj]


def _assert_same(a, b, what):
    for name, t in a.tensors().items():
        assert torch.equal(t, b.tensors()[name]), f"{what}: {name} differs"
    assert (a.num_nodes, a.num_features, a.num_classes) == (b.num_nodes, b.num_features, b.num_classes)


@pytest.mark.parametrize("edge_features", [False, True], ids=["nodes", "edges"])
@pytest.mark.parametrize("self_loops", [False, True])
@pytest.mark.parametrize("method", ["balanced", "contiguous", "metis", "random"])
@pytest.mark.parametrize("world", [1, 3, 4])
def test_rows_read_from_the_file_equal_the_split_of_the_whole_graph(tmp_path, world, method, self_loops, edge_features):
    """With ``edge_features`` the block's edge features too (permuted with the edges, added self
    loops marked), bit for bit."""
    graph = random_graph(edge_features=3 if edge_features else 0)
    path = str(tmp_path / "g.npz")
    save_npz(graph, path)
    data = DatasetFile(path, chunk_edges=50)  # many chunks
    whole = graph.with_self_loops() if self_loops else graph
    control_file, control_mem = RootFirstControl(), RootFirstControl()
    for rank in range(world):
        for needs_whole in (False, True):
            pg = GraphParallelGroup(rank=rank, world_size=world)
            pg_f, from_disk = from_file(
                data, pg, control_file, method, self_loops, seed=2, whole=needs_whole, edge_features=edge_features
            )
            pg_m, in_memory = from_graph(
                whole, pg, control_mem, method, seed=2, whole=needs_whole, edge_features=edge_features
            )
            assert (from_disk.edges is not None) == edge_features
            assert pg_f.counts == pg_m.counts
            _assert_same(from_disk, in_memory, f"rank {rank}/{world} {method} whole={needs_whole}")


def _arrays(tmp_path) -> dict:
    path = tmp_path / "base.npz"
    save_npz(random_graph(), path)
    return dict(np.load(path))


def _write(tmp_path, name: str, arrays: dict) -> str:
    path = str(tmp_path / name)
    np.savez(path, **arrays)
    return path


def test_bad_files_are_named(tmp_path):
    arrays = _arrays(tmp_path)
    n = arrays["x"].shape[0]
    src = arrays["src"].copy()
    src[7] = n + 5
    path = _write(tmp_path, "bad_edge.npz", {**arrays, "src": src})
    with pytest.raises(
        ValueError, match=rf"bad_edge.npz: edge index out of range in 'src' at position 7: {n + 5} is not in \[0, {n}\)"
    ):
        DatasetFile(path, chunk_edges=5).in_degrees(True)
    x = arrays["x"].copy()
    x[n - 1, 0] = np.nan  # only the last rank's rows are bad
    data = DatasetFile(_write(tmp_path, "bad_x.npz", {**arrays, "x": x}))
    data.node_data(np.arange(0, 10), np.arange(0, 10))
    with pytest.raises(ValueError, match=rf"bad_x.npz: features 'x' contain NaN or Inf \(first at node {n - 1}\)"):
        data.node_data(np.arange(n - 10, n), np.arange(n - 10, n))
    with pytest.raises(ValueError, match=r"missing.npz: missing array\(s\) dst"):
        DatasetFile(_write(tmp_path, "missing.npz", {k: v for k, v in arrays.items() if k != "dst"}))


@pytest.mark.slow
def test_a_synthetic_graph_is_written_to_the_cache_once(tmp_path, monkeypatch):
    monkeypatch.setenv("DSGRAPH_CACHE", str(tmp_path / "cache"))
    control = RootFirstControl()
    path = dataset_path("rmat:8:4", 3, control)
    assert path.startswith(str(tmp_path / "cache")) and os.path.isfile(path)
    stamp = os.stat(path).st_mtime_ns
    assert dataset_path("rmat:8:4", 3, control) == path and os.stat(path).st_mtime_ns == stamp
    data, expected = DatasetFile(path), load_dataset("rmat:8:4", seed=3)
    block = data.rows(0, data.num_nodes, self_loops=False)
    assert torch.equal(block.rowptr, expected.rowptr) and torch.equal(block.col, expected.col)
    assert isinstance(data.arrays["x"], np.memmap)  # read in place, not loaded
