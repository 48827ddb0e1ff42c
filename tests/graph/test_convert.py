"""``dsgraph convert``: every input format to .npz and to a partition store, the summary, the
histogram, and errors reported as one line naming the file."""

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from dsgraph.cli import main as cli_main
from dsgraph.graph.convert import main
from dsgraph.graph.graph import Graph
from dsgraph.graph.npz import load_npz, save_npz

EDGES = """# sparse ids, a duplicate, a self loop
from,to
100,200
200,300
300,100
100,200
500,500
"""


def write(path, text, gz=False):
    with gzip.open(path, "wt") if gz else open(path, "w") as f:
        f.write(text)
    return str(path)


def test_edge_list_to_npz_with_every_option(tmp_path, capsys):
    src = write(tmp_path / "g.csv.gz", EDGES, gz=True)
    out = str(tmp_path / "g.npz")
    assert main([src, out, "--relabel", "--symmetrize", "--dedup", "--drop-self-loops"]) == 0
    graph = load_npz(out)
    # relabelled 100->0, 200->1, 300->2, 500->3: a directed triangle made undirected, node 3 isolated
    assert graph.num_nodes == 4
    assert graph.rowptr.tolist() == [0, 2, 4, 6, 6] and graph.col.tolist() == [1, 2, 0, 2, 0, 1]
    assert np.load(tmp_path / "g.node_ids.npy").tolist() == [100, 200, 300, 500]
    text = capsys.readouterr().out
    assert "nodes          4" in text and "edges          6 (read 5;" in text
    assert "isolated nodes 1" in text and "header skipped 'from,to'" in text
    assert "self loops dropped 1, reverse edges added 4, duplicates dropped 2" in text
    assert "in-degree      min 0, mean 1.50, median 2, max 2" in text


def test_edge_list_without_options_keeps_ids_duplicates_and_loops(tmp_path):
    src = write(tmp_path / "g.txt", EDGES.replace(",", " "))
    out = str(tmp_path / "g.npz")
    assert main([src, out]) == 0
    graph = load_npz(out)
    assert graph.num_nodes == 501 and graph.num_edges == 5
    assert graph.rows(200, 201)[1].tolist() == [100, 100] and graph.rows(500, 501)[1].tolist() == [500]


def test_ogb_folder_to_npz_reports_classes_and_split(tmp_path, capsys):
    root = tmp_path / "ogbn_small"
    (root / "raw").mkdir(parents=True)
    (root / "split" / "random").mkdir(parents=True)
    write(root / "raw" / "num-node-list.csv.gz", "4\n", gz=True)
    write(root / "raw" / "edge.csv.gz", "0,1\n1,2\n2,3\n", gz=True)
    write(root / "raw" / "node-feat.csv.gz", "0.5,1\n1.5,2\n2.5,3\n3.5,4\n", gz=True)
    write(root / "raw" / "node-label.csv.gz", "0\n1\n0\n2\n", gz=True)
    for name, ids in (("train", "0\n1\n"), ("valid", "2\n"), ("test", "3\n")):
        write(root / "split" / "random" / f"{name}.csv.gz", ids, gz=True)
    out = str(tmp_path / "o.npz")
    assert main([str(root), out, "--symmetrize"]) == 0
    graph = load_npz(out)
    assert graph.num_edges == 6 and graph.x[:, 0].tolist() == [0.5, 1.5, 2.5, 3.5]
    assert graph.y.tolist() == [0, 1, 0, 2] and graph.train_mask.tolist() == [True, True, False, False]
    text = capsys.readouterr().out
    assert "classes        3 (4 labelled nodes)" in text
    assert "split          train 2, val 1, test 1 (scheme 'random')" in text


def small_graph() -> Graph:
    return Graph.from_edges(
        [0, 1, 1, 2, 2],
        [1, 2, 2, 0, 2],
        x=np.arange(6, dtype=np.float32).reshape(3, 2),
        y=[0, 1, -1],
        train_mask=[True, False, False],
        val_mask=[False, True, False],
        test_mask=[False] * 3,
        num_nodes=3,
    )


def test_npz_to_npz_without_options_is_exact(tmp_path):
    save_npz(small_graph(), tmp_path / "in.npz")
    assert main([str(tmp_path / "in.npz"), str(tmp_path / "out.npz")]) == 0
    a, b = load_npz(tmp_path / "in.npz"), load_npz(tmp_path / "out.npz")
    for name in ("rowptr", "col", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_npz_with_dedup_and_self_loop_removal(tmp_path):
    save_npz(small_graph(), tmp_path / "in.npz")
    assert main([str(tmp_path / "in.npz"), str(tmp_path / "out.npz"), "--dedup", "--drop-self-loops"]) == 0
    graph = load_npz(tmp_path / "out.npz")
    assert graph.rowptr.tolist() == [0, 1, 2, 3] and graph.col.tolist() == [2, 0, 1]
    assert graph.y.tolist() == [0, 1, -1]


def test_folder_output_writes_a_partition_store(tmp_path):
    from dsgraph.graph.store import load_permutation, load_store_graph

    src = write(tmp_path / "g.txt", EDGES.replace(",", " "))
    out = str(tmp_path / "store")
    assert main([src, out, "--relabel", "--symmetrize", "--parts", "2", "--method", "contiguous"]) == 0
    graph = load_store_graph(out)
    perm = load_permutation(out)
    node_ids = np.load(tmp_path / "store.node_ids.npy")
    assert graph.num_nodes == 4 and sorted(node_ids[perm].tolist()) == [100, 200, 300, 500]
    assert graph.num_edges == 9  # 4 edges + 4 reverses + 1 self loop kept once


def test_histogram_png(tmp_path):
    pytest.importorskip("matplotlib")
    src = write(tmp_path / "g.txt", "".join(f"0 {i}\n{i} {i + 1}\n" for i in range(1, 50)))
    png = tmp_path / "deg.png"
    assert main([src, str(tmp_path / "g.npz"), "--histogram", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


@pytest.mark.parametrize(
    "text, message",
    [
        ("0 1\n1 two\n", "g.txt, line 2: 'two' is not an integer"),
        ("0 1\n\n-4 1\n", "g.txt, line 3: negative source node id -4"),
    ],
)
def test_malformed_input_fails_with_file_and_line(tmp_path, capsys, text, message):
    src = write(tmp_path / "g.txt", text)
    assert main([src, str(tmp_path / "g.npz")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dsgraph convert: ") and message in err
    assert not os.path.exists(tmp_path / "g.npz")


def test_existing_output_needs_force(tmp_path, capsys):
    src = write(tmp_path / "g.txt", "0 1\n")
    out = tmp_path / "g.npz"
    out.write_bytes(b"old")
    assert main([src, str(out)]) == 1
    assert "exists; pass --force" in capsys.readouterr().err
    assert main([src, str(out), "--force"]) == 0 and load_npz(out).num_edges == 1


def test_relabel_on_npz_is_refused(tmp_path, capsys):
    save_npz(small_graph(), tmp_path / "in.npz")
    assert main([str(tmp_path / "in.npz"), str(tmp_path / "out.npz"), "--relabel"]) == 1
    assert "apply to edge lists only" in capsys.readouterr().err


@pytest.mark.slow
def test_registered_in_the_cli(tmp_path):
    src = write(tmp_path / "g.txt", "0 1\n")
    assert cli_main(["convert", src, str(tmp_path / "g.npz")]) == 0
    run = subprocess.run([sys.executable, "-m", "dsgraph", "convert", "--help"], capture_output=True, text=True)
    assert run.returncode == 0 and "--symmetrize" in run.stdout and "--relabel" in run.stdout
