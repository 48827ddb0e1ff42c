"""``dsgraph encode`` writes encodings beside the features and they come back bit for bit: from the
.npz (whole graph and a rank's rows), through ``dsgraph partition`` into a store, from a store
encoded in place (checksums in META.json), and into the isolated mode's chunk store; a run that asks
for an encoding the data lacks is refused with the command that computes it."""

import json
import os

import numpy as np
import pytest

from dsgraph.graph import load_npz, save_npz
from dsgraph.graph.convert import main as convert
from dsgraph.graph.encode.cli import main as encode
from dsgraph.graph.encodings import arrays_of, missing_error
from dsgraph.graph.partition_cli import main as partition
from dsgraph.graph.rank_reader import DatasetFile
from dsgraph.graph.store import load_part, load_permutation, load_store_graph
from tests.graphs import random_graph


@pytest.fixture()
def encoded(tmp_path):
    """(path, arrays): random_graph as a .npz with rwse [N, 6], lappe and lappe_eigvals [N, 3]."""
    path = str(tmp_path / "g.npz")
    save_npz(random_graph(), path)
    assert encode([path, "--rwse", "6", "--lappe", "3", "--quiet"]) == 0
    with np.load(path, allow_pickle=False) as f:
        return path, {name: f[name] for name in ("rwse", "lappe", "lappe_eigvals")}


def test_encode_writes_arrays_into_the_npz_and_keeps_the_rest(encoded, tmp_path):
    path, arrays = encoded
    assert arrays["rwse"].shape == (103, 6) and arrays["lappe"].shape == arrays["lappe_eigvals"].shape == (103, 3)
    graph, plain = load_npz(path), random_graph()
    for name in ("x", "y", "train_mask", "col", "rowptr"):
        assert np.array_equal(getattr(graph, name).numpy(), getattr(plain, name).numpy())
    for name, array in arrays.items():
        assert np.array_equal(graph.enc[name].numpy(), array)
    assert np.array_equal(graph.enc["degree"].numpy(), plain.enc["degree"].numpy())
    assert np.array_equal(plain.enc["degree"][:, 0].numpy(), plain.in_degrees().numpy())
    ids = np.array([5, 0, 77])
    nodes = DatasetFile(path).node_data(ids, ids, arrays_of(["rwse", "lappe", "degree"]))
    assert np.array_equal(nodes.enc["lappe_eigvals"].numpy(), arrays["lappe_eigvals"][ids])
    assert np.array_equal(nodes.enc["degree"].numpy(), plain.enc["degree"].numpy()[ids])
    assert encode([path, "--rwse", "4", "--quiet"]) == 0  # replaces rwse, keeps lappe
    again = load_npz(path)
    assert again.enc["rwse"].shape == (103, 4) and np.array_equal(again.enc["lappe"].numpy(), arrays["lappe"])
    copy = str(tmp_path / "copy.npz")
    assert encode([path, "--lappe", "2", "--out", copy, "--quiet"]) == 0
    assert load_npz(copy).enc["lappe"].shape == (103, 2) and load_npz(path).enc["lappe"].shape == (103, 3)


def test_partition_carries_encodings_into_the_store_bit_for_bit(encoded, tmp_path):
    path, arrays = encoded
    store = str(tmp_path / "store")
    assert partition(["--dataset", path, "--parts", "3", "--method", "random", "--out", store, "--quiet"]) == 0
    perm = np.asarray(load_permutation(store))
    degree = load_npz(path).enc["degree"].numpy()
    for rank in range(3):
        part = load_part(store, rank, 3, encodings=("rwse", "lappe", "lappe_eigvals", "degree"))
        rows = perm[part.start : part.end]
        for name, array in arrays.items():
            assert np.array_equal(part.enc[name], array[rows])
        assert np.array_equal(part.enc["degree"], degree[rows])
    whole = load_store_graph(store)
    assert np.array_equal(whole.enc["rwse"].numpy(), arrays["rwse"][perm])


def test_converted_stores_keep_the_degrees_and_encodings(encoded, tmp_path):
    path, arrays = encoded
    for name, cleanup in (("kept", []), ("cleaned", ["--dedup"])):
        store = str(tmp_path / name)
        assert convert([path, store, "--parts", "2", "--method", "random", *cleanup]) == 0
        perm, graph = np.asarray(load_permutation(store)), load_npz(path)
        got = load_store_graph(store)
        assert np.array_equal(got.enc["degree"].numpy(), graph.enc["degree"].numpy()[perm])
        assert ("rwse" in got.enc) == (not cleanup)  # a cleaned-up graph's encodings would be stale
        if not cleanup:
            assert np.array_equal(got.enc["rwse"].numpy(), arrays["rwse"][perm])


def test_encode_a_store_in_place_with_checksums(tmp_path):
    src = str(tmp_path / "g.npz")
    save_npz(random_graph(), src)
    store = str(tmp_path / "store")
    assert partition(["--dataset", src, "--parts", "2", "--method", "random", "--out", store, "--quiet"]) == 0
    with pytest.raises(ValueError, match=r"no 'rwse' array.*`dsgraph encode .*store --rwse 16`"):
        load_part(store, 0, 2, encodings=("rwse",))
    assert encode([store, "--rwse", "5", "--rwse-method", "exact", "--quiet"]) == 0
    meta = json.load(open(os.path.join(store, "META.json")))
    assert meta["encodings"] == {"degree": 2, "rwse": 5} and "part_0001/rwse.npy" in meta["sha256"]
    perm = np.asarray(load_permutation(store))
    reference = str(tmp_path / "ref.npz")
    save_npz(random_graph(), reference)
    assert encode([reference, "--rwse", "5", "--rwse-method", "exact", "--quiet"]) == 0
    want = load_npz(reference).enc["rwse"].numpy()[perm]
    got = np.concatenate([load_part(store, r, 2, encodings=("rwse",)).enc["rwse"] for r in range(2)])
    np.testing.assert_allclose(got, want, atol=1e-6)  # exact in either numbering (sums in another order)
    with open(os.path.join(store, "part_0001", "rwse.npy"), "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"\x00\x00\x80\x7f")  # +inf in the last entry
    with pytest.raises(ValueError, match="sha256"):
        load_part(store, 1, 2, encodings=("rwse",))


def test_encode_refuses_what_it_cannot_do(tmp_path, capsys):
    assert encode(["cora", "--rwse", "4", "--quiet"]) == 1
    assert "--out cora_enc.npz" in capsys.readouterr().err
    path = str(tmp_path / "g.npz")
    save_npz(random_graph(), path)
    assert encode([path, "--quiet"]) == 1
    assert "nothing to compute" in capsys.readouterr().err
    assert encode([path, "--rwse", "0", "--quiet"]) == 1
    assert "--rwse must be at least 1" in capsys.readouterr().err
    assert encode([str(tmp_path), "--rwse", "2", "--quiet"]) == 1
    assert "not a partition store" in capsys.readouterr().err


def test_missing_encoding_messages_name_the_command():
    message = str(missing_error("rmat:12", "/cache/rmat.npz", ["rwse", "lappe", "lappe_eigvals"]))
    assert "`dsgraph encode rmat:12 --rwse 16 --lappe 8`" in message and "'model.encodings'" in message
    assert "`dsgraph encode cora --lappe 8 --out cora_enc.npz` and train on 'cora_enc.npz'" in str(
        missing_error("cora", "c", ["lappe"])
    )
    assert "`dsgraph encode rmat:10 --seed 3 --rwse 16`" in str(missing_error("rmat:10", "f.npz", ["rwse"], seed=3))


@pytest.mark.parametrize("chunk_edges", [1, 2, 7, 1 << 24])
def test_csr_edges_yield_every_edge_once_in_chunks(chunk_edges):
    """The counted encodings of a CSR (edge-list ingest, a store encoded in place) read its edges in
    chunks: together they are the CSR's edges, rows without edges included."""
    from dsgraph.graph.encodings import counted, csr_edges

    counts = np.array([2, 0, 3, 0, 0, 1, 4, 0])
    ptr = np.concatenate([[0], np.cumsum(counts)])
    col = np.random.default_rng(0).integers(0, counts.size, ptr[-1])
    chunks = list(csr_edges(ptr, col, chunk_edges))
    assert np.array_equal(np.concatenate([s for s, _ in chunks]), col)
    assert np.array_equal(np.concatenate([d for _, d in chunks]), np.repeat(np.arange(counts.size), counts))
    degree = counted(csr_edges(ptr, col, chunk_edges), counts.size)["degree"]
    assert np.array_equal(degree, np.stack([counts, np.bincount(col, minlength=counts.size)], axis=1))
