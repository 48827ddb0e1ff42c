"""Edge features ``edge_attr`` [E, F_e] through the data model: validated, permuted with their edges
by the CSR build, self loops and partitioning, and bit for bit through every reader and converter
(.npz in both layouts, OGB folders, edge lists with extra columns, PyG) and the partition store,
including per-rank loading from it."""

from __future__ import annotations

import gzip
import os

import numpy as np
import pytest
import torch

from dsgraph.comm import GraphParallelGroup
from dsgraph.graph import Graph, load_npz, save_npz
from dsgraph.graph.convert import main as convert
from dsgraph.graph.loading import from_graph, from_store
from dsgraph.graph.partition import partition_nodes, relabel
from dsgraph.graph.rank_reader import DatasetFile
from dsgraph.graph.store import file_sha256, load_permutation, load_store_graph, write_store
from tests.graphs import random_graph

N = 6
SRC = np.array([3, 0, 2, 2, 1, 4, 4, 5, 2])  # a repeated edge (2 -> 1), a self loop (4 -> 4), node 6 has no in-edges
DST = np.array([1, 1, 1, 0, 2, 4, 3, 3, 1])


def features(rows: int, width: int = 3, seed: int = 0) -> np.ndarray:
    """Float32 features whose every value is distinct, so a misplaced row cannot go unnoticed."""
    return np.random.default_rng(seed).standard_normal((rows, width)).astype(np.float32)


def small(edge_attr) -> Graph:
    n = N + 1
    return Graph.from_edges(
        SRC,
        DST,
        x=np.ones((n, 1), np.float32),
        y=np.zeros(n, np.int64),
        train_mask=np.zeros(n, bool),
        val_mask=np.zeros(n, bool),
        test_mask=np.zeros(n, bool),
        num_nodes=n,
        edge_attr=edge_attr,
    )


def triples(graph: Graph) -> list[tuple[int, int, tuple[float, ...]]]:
    """(src, dst, features) of every edge, sorted: what must survive any reordering."""
    dst = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.in_degrees())
    return sorted(zip(graph.col.tolist(), dst.tolist(), map(tuple, graph.edge_attr.tolist())))


def test_csr_build_moves_features_with_their_edges():
    attr = features(SRC.size)
    graph = small(attr)
    assert graph.num_edge_features == 3 and graph.edge_attr.dtype == torch.float32
    want = sorted(zip(SRC.tolist(), DST.tolist(), map(tuple, attr.tolist())))
    assert triples(graph) == want
    order = np.argsort(DST, kind="stable")  # in-edges of a row keep their input order
    assert torch.equal(graph.edge_attr, torch.from_numpy(attr[order]))


def test_bad_edge_features_are_named():
    with pytest.raises(ValueError, match=r"'edge_attr' must be \[E, F_e\] with E = 9"):
        small(features(8))
    bad = features(SRC.size)
    bad[4, 1] = np.nan
    with pytest.raises(ValueError, match="'edge_attr' contain NaN or Inf"):
        small(bad)
    with pytest.raises(ValueError, match="must be numeric"):
        small(np.array(["a"] * SRC.size))


def test_added_self_loops_are_marked_with_zero_features_and_an_existing_loop_keeps_its_own():
    graph = small(features(SRC.size)).with_self_loops()
    dst = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.in_degrees())
    loops = graph.col.long() == dst
    assert int(loops.sum()) == N + 1  # one per node
    assert torch.equal(graph.added_loops, loops & (dst != 4))  # node 4 had its own loop
    assert not bool(graph.edge_attr[graph.added_loops].any())
    row4 = graph.edge_attr[(dst == 4) & loops]
    assert torch.equal(row4, torch.from_numpy(features(SRC.size)[5:6]))  # the loop 4 -> 4 is input edge 5


def test_partitioning_relabels_features_with_their_edges():
    graph = random_graph(edge_features=4).with_self_loops()
    parts = partition_nodes(graph, 3, "random", seed=1)
    new, perm, _ = relabel(graph, parts, 3)
    perm_t = torch.from_numpy(perm)
    dst_new = torch.repeat_interleave(torch.arange(new.num_nodes), new.in_degrees())
    dst_old = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.in_degrees())
    key = lambda s, d, a, loop: sorted(zip(s.tolist(), d.tolist(), map(tuple, a.tolist()), loop.tolist()))  # noqa: E731
    assert key(perm_t[new.col.long()], perm_t[dst_new], new.edge_attr, new.added_loops) == key(
        graph.col.long(), dst_old, graph.edge_attr, graph.added_loops
    )


def test_npz_round_trip_is_exact(tmp_path):
    graph = random_graph(edge_features=5)
    save_npz(graph, tmp_path / "g.npz")
    back = load_npz(tmp_path / "g.npz")
    assert torch.equal(back.edge_attr, graph.edge_attr) and torch.equal(back.col, graph.col)
    with pytest.raises(ValueError, match="save it before with_self_loops"):
        save_npz(graph.with_self_loops(), tmp_path / "loops.npz")


def test_benchmark_layout_reads_edge_features_in_both_directions(tmp_path):
    edges = np.array([[0, 1], [1, 2], [2, 0], [3, 1]])
    attr = features(4, 2)
    n = 4
    np.savez(
        tmp_path / "b.npz",
        edges=edges,
        edge_features=attr,
        node_features=np.ones((n, 1), np.float32),
        node_labels=np.zeros(n, np.int64),
        train_masks=np.ones((2, n), bool),
        val_masks=np.zeros((2, n), bool),
        test_masks=np.zeros((2, n), bool),
    )
    graph = load_npz(tmp_path / "b.npz")
    want = sorted(
        [(int(u), int(v), tuple(a)) for (u, v), a in zip(edges, attr.tolist())]
        + [(int(v), int(u), tuple(a)) for (u, v), a in zip(edges, attr.tolist())]
    )
    assert triples(graph) == want


def test_npz_edge_features_of_the_wrong_length_are_named(tmp_path):
    arrays = dict(np.load(_saved(tmp_path)))
    arrays["edge_attr"] = arrays["edge_attr"][:-1]
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match=r"bad.npz: edge features 'edge_attr' must be \[E, F_e\]"):
        DatasetFile(str(tmp_path / "bad.npz"))


def _saved(tmp_path) -> str:
    path = str(tmp_path / "g.npz")
    save_npz(random_graph(edge_features=2), path)
    return path


def test_edge_list_columns_become_features_through_every_clean_up(tmp_path):
    lines = ["src,dst,w,t", "10,20,0.5,-1", "20,30,1.25,2", "30,10,-3,4", "10,20,7,7", "40,40,9,9"]
    path = tmp_path / "e.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    out = str(tmp_path / "e.npz")
    assert (
        convert([str(path), out, "--edge-features", "--relabel", "--symmetrize", "--dedup", "--drop-self-loops"]) == 0
    )
    graph = load_npz(out)  # 10 -> 0, 20 -> 1, 30 -> 2, 40 -> 3; the first of the repeated 10 -> 20 kept
    want = sorted(
        [
            (0, 1, (0.5, -1.0)),
            (1, 0, (0.5, -1.0)),
            (1, 2, (1.25, 2.0)),
            (2, 1, (1.25, 2.0)),
            (2, 0, (-3.0, 4.0)),
            (0, 2, (-3.0, 4.0)),
        ]
    )
    assert triples(graph) == want
    (tmp_path / "short.txt").write_text("1 2\n")
    assert convert([str(tmp_path / "short.txt"), str(tmp_path / "s.npz"), "--edge-features"]) == 1


def test_ogb_edge_feat_file_follows_the_edges(tmp_path):
    root = tmp_path / "ogbn_tiny"
    (root / "raw").mkdir(parents=True)
    edges, attr = np.array([[1, 0], [2, 1], [0, 2], [2, 0]]), features(4, 3)
    for name, rows in (
        ("num-node-list", ["3"]),
        ("edge", [f"{u},{v}" for u, v in edges]),
        ("edge-feat", [",".join(repr(float(a)) for a in row) for row in attr]),
    ):
        with gzip.open(root / "raw" / f"{name}.csv.gz", "wt") as f:
            f.write("\n".join(rows) + "\n")
    out = str(tmp_path / "o.npz")
    assert convert([str(root), out]) == 0
    assert triples(load_npz(out)) == sorted((int(u), int(v), tuple(a)) for (u, v), a in zip(edges, attr.tolist()))


def test_pyg_round_trip_keeps_edge_features():
    pytest.importorskip("torch_geometric.data")
    from dsgraph.graph.interop import from_pyg, to_pyg

    graph = random_graph(edge_features=3)
    data = to_pyg(graph)
    assert torch.equal(data.edge_attr, graph.edge_attr)
    back = from_pyg(data)
    assert torch.equal(back.edge_attr, graph.edge_attr) and torch.equal(back.col, graph.col)


@pytest.fixture
def store(tmp_path) -> tuple[str, Graph]:
    graph = random_graph(edge_features=3)
    parts = partition_nodes(graph, 3, "random", seed=0)
    relabelled, perm, ranges = relabel(graph, parts, 3)
    out = str(tmp_path / "store")
    write_store(relabelled, perm, ranges, out, "random")
    return out, relabelled


def test_partition_store_round_trip_is_exact(store):
    path, relabelled = store
    back = load_store_graph(path)
    assert torch.equal(back.edge_attr, relabelled.edge_attr) and not bool(back.added_loops.any())
    for r in range(3):
        assert os.path.isfile(os.path.join(path, f"part_{r:04d}", "edge_attr.npy"))


def test_partition_store_edge_features_are_checksummed(store):
    path, _ = store
    target = os.path.join(path, "part_0001", "edge_attr.npy")
    array = np.load(target)
    array[0, 0] += 1.0
    np.save(target, array)
    with pytest.raises(ValueError, match="edge_attr.npy: sha256 checksum mismatch"):
        load_store_graph(path)
    assert file_sha256(target)  # still a readable file: only the checksum caught it


@pytest.mark.parametrize("self_loops", [False, True])
def test_per_rank_loading_from_the_store_equals_the_split_in_memory(store, self_loops):
    path, relabelled = store
    whole = relabelled.with_self_loops() if self_loops else relabelled

    class Control:  # one process plays every rank: nothing to exchange
        def bcast(self, obj, root=0):
            return obj

        def allgather(self, obj):
            return [obj]

    for rank in range(3):
        pg = GraphParallelGroup(rank=rank, world_size=3)
        pg_s, from_disk = from_store(path, pg, Control(), self_loops, edge_features=True)
        _, in_memory = from_graph(whole, pg_s, Control(), None, 0, edge_features=True)
        for name in ("attr", "added_loop"):
            assert torch.equal(getattr(from_disk.edges, name), getattr(in_memory.edges, name)), (rank, name)
        assert torch.equal(from_disk.block.col, in_memory.block.col)


def test_a_model_that_reads_edge_features_needs_a_graph_that_has_them(tmp_path):
    graph = random_graph()
    pg = GraphParallelGroup(rank=0, world_size=1)
    with pytest.raises(
        ValueError, match="has no edge_attr; use a dataset with edge features, or set model.edge_features"
    ):
        from_graph(graph, pg, None, None, 0, edge_features=True)
    path = str(tmp_path / "plain.npz")
    save_npz(graph, path)
    with pytest.raises(ValueError, match="plain.npz: the model reads edge features .* no 'edge_attr' array"):
        DatasetFile(path).require_edge_features()


def test_encodings_and_the_partition_cli_keep_edge_features_bit_for_bit(tmp_path):
    """``dsgraph encode`` rewrites the .npz beside its edge features; ``dsgraph partition`` writes a
    store that holds both, and each reads back exactly."""
    from dsgraph.graph.encode.cli import main as encode
    from dsgraph.graph.partition_cli import main as partition

    graph = random_graph(edge_features=3)
    path, out = str(tmp_path / "g.npz"), str(tmp_path / "store")
    save_npz(graph, path)
    assert encode([path, "--rwse", "4", "--quiet"]) == 0
    encoded = load_npz(path)
    assert torch.equal(encoded.edge_attr, graph.edge_attr) and "rwse" in encoded.enc
    assert partition(["--dataset", path, "--parts", "2", "--method", "random", "--out", out, "--quiet"]) == 0
    back = load_store_graph(out)
    perm = torch.from_numpy(
        np.array(load_permutation(out))
    )  # relabelled id -> dataset id (a copy: the stored one is read-only)
    relabelled = sorted((int(perm[s]), int(perm[d]), attr) for s, d, attr in triples(back))
    assert relabelled == triples(graph) and torch.equal(back.enc["rwse"], encoded.enc["rwse"][perm])
