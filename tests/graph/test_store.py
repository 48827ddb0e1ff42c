"""The partition store: round trip, per-rank loading, and every failure named by its file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from dsgraph.graph import load_dataset
from dsgraph.graph.partition import partition_nodes, relabel
from dsgraph.graph.store import (
    META_FILE,
    file_sha256,
    load_part,
    load_permutation,
    load_store_graph,
    read_meta,
    write_store,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def relabelled():
    graph = load_dataset("cora")
    return relabel(graph, partition_nodes(graph, 4, "metis"), 4)


@pytest.fixture(scope="module")
def store(relabelled, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("store") / "cora4")
    graph, perm, ranges = relabelled
    write_store(graph, perm, ranges, out, "metis", dataset="cora")
    return out


@pytest.fixture
def copy(store, tmp_path) -> str:
    """A private copy of the store that a test may damage."""
    return shutil.copytree(store, tmp_path / "cora4")


def test_round_trip_reassembles_the_relabelled_graph(store, relabelled):
    graph, perm, _ = relabelled
    loaded = load_store_graph(store)
    for name in ("rowptr", "col", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(loaded, name), getattr(graph, name)), name
    assert np.array_equal(load_permutation(store), perm)


def test_meta_describes_the_store(store, relabelled):
    graph, _, ranges = relabelled
    meta = read_meta(store)
    assert meta["format_version"] == 1 and meta["method"] == "metis" and meta["dataset"] == "cora"
    assert (meta["num_parts"], meta["num_nodes"], meta["num_edges"]) == (4, graph.num_nodes, graph.num_edges)
    assert (meta["num_features"], meta["feature_dtype"], meta["num_classes"]) == (1433, "float32", 7)
    assert meta["node_ranges"] == ranges.tolist()
    assert len(meta["sha256"]) == 1 + 4 * 9  # perm.npy and 8 arrays per part, and each node's in/out degree
    assert meta["encodings"] == {"degree": 2}
    for relpath, digest in meta["sha256"].items():
        assert file_sha256(os.path.join(store, relpath)) == digest


def test_load_part_maps_only_its_own_files(store, relabelled, monkeypatch):
    graph, _, ranges = relabelled
    opened = []
    real_load = np.load
    monkeypatch.setattr(np, "load", lambda path, *a, **k: opened.append(str(path)) or real_load(path, *a, **k))
    part = load_part(store, 2, 4)
    assert len(opened) == 8 and all(os.sep + "part_0002" + os.sep in path for path in opened)
    start, end = ranges[2]
    assert (part.start, part.end, part.num_nodes, part.num_parts) == (start, end, graph.num_nodes, 4)
    rowptr, col = graph.rows(start, end)
    assert np.array_equal(part.rowptr, rowptr.numpy()) and np.array_equal(part.col, col.numpy())
    assert np.array_equal(part.x, graph.x[start:end].numpy())
    assert np.array_equal(part.y, graph.y[start:end].numpy())
    assert np.array_equal(part.halo, np.unique(col.numpy()[(col.numpy() < start) | (col.numpy() >= end)]))
    assert isinstance(part.x, np.memmap) and not part.x.flags.writeable


def test_truncated_array_is_named(copy):
    path = os.path.join(copy, "part_0001", "x.npy")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(ValueError, match=f"{path}: file is truncated"):
        load_part(copy, 1, 4)
    with pytest.raises(ValueError, match=f"{path}: file is truncated"):
        load_part(copy, 1, 4, verify=False)
    load_part(copy, 0, 4)  # other parts are unaffected


def test_checksum_mismatch_is_named(copy):
    path = os.path.join(copy, "part_0003", "col.npy")
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(ValueError, match=f"{path}: sha256 checksum mismatch"):
        load_part(copy, 3, 4)


def test_part_count_must_equal_world_size(store):
    with pytest.raises(
        ValueError, match=r"META.json: store .* has 4 parts but the job has 2 ranks; repartition with .*--parts 2"
    ):
        load_part(store, 0, 2)


def test_newer_format_version_is_refused(copy):
    path = os.path.join(copy, META_FILE)
    with open(path) as f:
        meta = json.load(f)
    meta["format_version"] = 2
    with open(path, "w") as f:
        json.dump(meta, f)
    with pytest.raises(ValueError, match=f"{path}: format_version 2 is newer than this dsgraph supports"):
        load_part(copy, 0, 4)


def test_missing_files_are_named(copy):
    path = os.path.join(copy, "part_0000", "halo.npy")
    os.remove(path)
    with pytest.raises(FileNotFoundError, match=f"{path}: array file missing"):
        load_part(copy, 0, 4)
    os.remove(os.path.join(copy, META_FILE))
    with pytest.raises(FileNotFoundError, match="META.json missing"):
        load_part(copy, 1, 4)


def rewrite(store: str, relpath: str, array: np.ndarray) -> str:
    """Replaces one array and re-records its checksum, as a buggy writer would."""
    path = os.path.join(store, relpath)
    np.save(path, array)
    meta_path = os.path.join(store, META_FILE)
    with open(meta_path) as f:
        meta = json.load(f)
    meta["sha256"][relpath], meta["file_bytes"][relpath] = file_sha256(path), os.path.getsize(path)
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    return path


def test_bad_contents_with_valid_checksums_are_named(copy):
    col = np.load(os.path.join(copy, "part_0001", "col.npy"))
    col[5] = 10**6
    path = rewrite(copy, "part_0001/col.npy", col)
    with pytest.raises(ValueError, match=f"{path}: a node id is outside"):
        load_part(copy, 1, 4)
    x = np.load(os.path.join(copy, "part_0002", "x.npy"))
    x[3, 3] = np.nan
    path = rewrite(copy, "part_0002/x.npy", x)
    with pytest.raises(ValueError, match=f"{path}: features contain NaN"):
        load_part(copy, 2, 4)
    path = rewrite(copy, "part_0003/y.npy", np.zeros(5, np.int64))
    with pytest.raises(ValueError, match=rf"{path}: expected int64 \(\d+,\) from META.json, found int64 \(5,\)"):
        load_part(copy, 3, 4)


def test_write_refuses_a_non_empty_folder(relabelled, tmp_path):
    graph, perm, ranges = relabelled
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        write_store(graph, perm, ranges, tmp_path, "metis")
    with pytest.raises(FileExistsError, match="not a partition store"):
        write_store(graph, perm, ranges, tmp_path, "metis", overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_cli_partitions_cora_end_to_end(tmp_path):
    out, stats = tmp_path / "store", tmp_path / "stats.json"
    cmd = [
        sys.executable,
        "-m",
        "dsgraph",
        "partition",
        "--dataset",
        "cora",
        "--parts",
        "2",
        "--method",
        "balanced",
        "--out",
        str(out),
        "--stats-json",
        str(stats),
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "edge cut" in done.stdout and "halo nodes" in done.stdout
    figures = json.loads(stats.read_text())
    assert figures["quality"]["num_parts"] == 2 and figures["quality"]["num_edges"] == 10556
    assert read_meta(out)["quality"] == figures["quality"]
    assert load_store_graph(out).num_nodes == 2708

    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and "pass --force" in again.stderr
