"""Edge-list and OGB readers and the edge clean-up: fixtures written by the tests, exact arrays, and
errors that name the file and line for malformed input."""

import gzip
import os

import numpy as np
import pytest

from dsgraph.graph.edgelist import read_edge_list, unique_ids
from dsgraph.graph.edges import CleanupStats, csr_from_keys, destination_order, edge_keys
from dsgraph.graph.ingest import CleanupOptions, detect_format, read_graph
from dsgraph.graph.ogb import read_ogb
from dsgraph.graph.readers import count_lines


def write(path, text: str, gz: bool = False) -> str:
    path = str(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with gzip.open(path, "wt") if gz else open(path, "w") as f:
        f.write(text)
    return path


# ---------------------------------------------------------------- edge lists

MESSY = """# a comment line
% another comment style
src dst
10 20
20 30 0.5
  30\t10   # trailing comment

10 20
40 40
70 20
"""


def test_edge_list_with_header_comments_and_extra_columns(tmp_path):
    edges = read_edge_list(write(tmp_path / "e.txt", MESSY))
    assert edges.header == "src dst"
    assert edges.src.tolist() == [10, 20, 30, 10, 40, 70]
    assert edges.dst.tolist() == [20, 30, 10, 20, 40, 20]
    assert edges.src.dtype == np.int32 and edges.num_nodes == 71 and edges.node_ids is None


def test_edge_list_relabel_numbers_distinct_ids_in_order(tmp_path):
    edges = read_edge_list(write(tmp_path / "e.txt", MESSY), relabel=True)
    assert edges.node_ids.tolist() == [10, 20, 30, 40, 70]
    assert edges.src.tolist() == [0, 1, 2, 0, 3, 4] and edges.dst.tolist() == [1, 2, 0, 1, 3, 1]
    assert edges.num_nodes == 5 and edges.src.dtype == np.int32


def test_edge_list_comma_separated_gzip_with_header(tmp_path):
    path = write(tmp_path / "e.csv.gz", "source,target\n0, 1\n1,2\n", gz=True)
    edges = read_edge_list(path)
    assert edges.header == "source,target" and edges.src.tolist() == [0, 1] and edges.dst.tolist() == [1, 2]


def test_edge_list_relabel_handles_ids_beyond_int32(tmp_path):
    edges = read_edge_list(write(tmp_path / "e.txt", "5000000000 7\n7 5000000000\n"), relabel=True)
    assert edges.node_ids.tolist() == [7, 5000000000] and edges.src.tolist() == [1, 0]


def test_edge_list_blocks_join_correctly(tmp_path):
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 1000, size=(500, 2))
    text = "# header comment\n" + "".join(f"{u} {v}\n" for u, v in pairs)
    edges = read_edge_list(write(tmp_path / "e.txt", text), block_bytes=64)
    assert np.array_equal(edges.src, pairs[:, 0]) and np.array_equal(edges.dst, pairs[:, 1])


def test_empty_edge_list_has_no_nodes(tmp_path):
    edges = read_edge_list(write(tmp_path / "e.txt", "# nothing here\n"))
    assert edges.num_nodes == 0 and edges.src.size == 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("0 1\n1 2\n2 x3\n", r"e.txt, line 3: 'x3' is not an integer"),
        ("0 1\n# c\n1 -2\n", r"e.txt, line 3: negative destination node id -2"),
        ("0 1\n1\n", r"e.txt, line 2: expected at least 2 values, found 1"),
        ("0 1\n1 2.5\n", r"e.txt, line 2: '2.5' is not an integer"),
        ("0 3000000000\n", r"e.txt, line 1: destination node id 3000000000 exceeds the int32 limit .* --relabel"),
    ],
)
def test_edge_list_errors_name_file_and_line(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        read_edge_list(write(tmp_path / "e.txt", text))


def test_edge_list_error_line_is_exact_across_blocks(tmp_path):
    text = "".join(f"{i} {i + 1}\n" for i in range(999)) + "5 oops\n"
    with pytest.raises(ValueError, match=r"line 1000: 'oops' is not an integer"):
        read_edge_list(write(tmp_path / "e.txt", text), block_bytes=100)


def test_truncated_gzip_edge_list_names_the_file(tmp_path):
    path = write(tmp_path / "e.txt.gz", "".join(f"{i} {i + 1}\n" for i in range(5000)), gz=True)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"e.txt.gz: truncated or corrupt gzip file"):
        read_edge_list(path)


def test_missing_edge_list_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt: no such edge list"):
        read_edge_list(tmp_path / "nope.txt")


def test_count_lines_with_and_without_final_newline(tmp_path):
    assert count_lines(write(tmp_path / "a.txt", "1 2\n3 4\n")) == 2
    assert count_lines(write(tmp_path / "b.txt", "1 2\n3 4")) == 2
    assert count_lines(write(tmp_path / "c.txt", "")) == 0


def test_unique_ids_merges_chunks():
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 10**12, size=(2, 3000))
    assert np.array_equal(unique_ids(src, dst, chunk=7), np.unique(np.concatenate([src, dst])))


# ---------------------------------------------------------------- clean-up and CSR


def reference_csr(src, dst, n, symmetrize, drop_self_loops, dedup):
    pairs = list(zip(src.tolist(), dst.tolist()))
    if drop_self_loops:
        pairs = [(u, v) for u, v in pairs if u != v]
    if symmetrize:
        pairs += [(v, u) for u, v in pairs if u != v]
    if dedup:
        pairs = list(set(pairs))
    pairs.sort(key=lambda p: (p[1], p[0]))
    rowptr = np.searchsorted([v for _, v in pairs], np.arange(n + 1), side="left")
    return rowptr, np.array([u for u, _ in pairs], dtype=np.int32)


@pytest.mark.parametrize("symmetrize", [False, True])
@pytest.mark.parametrize("drop_self_loops", [False, True])
@pytest.mark.parametrize("dedup", [False, True])
def test_csr_cleanup_matches_reference(symmetrize, drop_self_loops, dedup):
    rng = np.random.default_rng(7)
    n = 13
    src, dst = rng.integers(0, n, size=(2, 200)).astype(np.int32)
    stats = CleanupStats()
    keys = edge_keys(src, dst, n, symmetrize=symmetrize, drop_self_loops=drop_self_loops, stats=stats, chunk=17)
    rowptr, col = csr_from_keys(keys, n, dedup=dedup, stats=stats, chunk=11)
    want_rowptr, want_col = reference_csr(src, dst, n, symmetrize, drop_self_loops, dedup)
    assert np.array_equal(rowptr, want_rowptr) and np.array_equal(col, want_col)
    assert rowptr.dtype == np.int64 and col.dtype == np.int32
    loops = int((src == dst).sum())
    assert stats.self_loops_dropped == (loops if drop_self_loops else 0)
    assert stats.reverse_edges_added == (200 - loops if symmetrize else 0)
    assert len(col) == 200 - stats.self_loops_dropped + stats.reverse_edges_added - stats.duplicates_dropped


@pytest.mark.parametrize("num_src", [1, 13, 2**31 - 1])
def test_destination_order_is_lexsort_by_destination_then_source(num_src):
    rng = np.random.default_rng(3)
    src = rng.integers(0, num_src, size=500)
    src[::7] = src[0]  # repeated edges: kept in input order, as lexsort keeps them
    dst = rng.integers(0, 40, size=500).astype(np.int32)
    dst[::7] = dst[0]
    assert np.array_equal(destination_order(dst, src, num_src), np.lexsort((src, dst)))
    assert destination_order(dst[:0], src[:0], num_src).size == 0


# ---------------------------------------------------------------- OGB folders

OGB_EDGES = [(0, 1), (1, 2), (2, 0), (3, 1), (1, 2)]


def write_ogb(root, *, labels="0\n1\n2\n1\nnan\n", split_scheme="time", gz=True, features=True) -> str:
    root = str(root)
    ext = ".csv.gz" if gz else ".csv"
    write(f"{root}/raw/num-node-list{ext}", "5\n", gz)
    write(f"{root}/raw/num-edge-list{ext}", f"{len(OGB_EDGES)}\n", gz)
    write(f"{root}/raw/edge{ext}", "".join(f"{u},{v}\n" for u, v in OGB_EDGES), gz)
    if features:
        write(f"{root}/raw/node-feat{ext}", "".join(f"{i}.5,{-i},1e-3\n" for i in range(5)), gz)
    if labels is not None:
        write(f"{root}/raw/node-label{ext}", labels, gz)
    if split_scheme:
        write(f"{root}/split/{split_scheme}/train{ext}", "0\n1\n", gz)
        write(f"{root}/split/{split_scheme}/valid{ext}", "2\n", gz)
        write(f"{root}/split/{split_scheme}/test{ext}", "3\n", gz)
    return root


@pytest.mark.parametrize("gz", [True, False])
def test_read_ogb_arrays(tmp_path, gz):
    data = read_ogb(write_ogb(tmp_path / "ogbn_tiny", gz=gz))
    assert data.num_nodes == 5 and data.split == "time"
    assert list(zip(data.src.tolist(), data.dst.tolist())) == OGB_EDGES
    assert np.array_equal(data.x, np.array([[i + 0.5, -i, 1e-3] for i in range(5)], dtype=np.float32))
    assert data.x.dtype == np.float32
    assert data.y.tolist() == [0, 1, 2, 1, -1]
    assert data.masks["train_mask"].tolist() == [True, True, False, False, False]
    assert data.masks["val_mask"].tolist() == [False, False, True, False, False]
    assert data.masks["test_mask"].tolist() == [False, False, False, True, False]


def test_read_graph_from_ogb_folder_builds_csr(tmp_path):
    root = write_ogb(tmp_path / "ogbn_tiny")
    assert detect_format(root) == "ogb"
    result = read_graph(root, cleanup=CleanupOptions(dedup=True))
    graph = result.graph
    assert graph.name == "ogbn_tiny" and result.stats.duplicates_dropped == 1
    assert graph.rowptr.tolist() == [0, 1, 3, 4, 4, 4]  # in-edges: 0 <- 2; 1 <- 0, 3; 2 <- 1
    assert graph.col.tolist() == [2, 0, 3, 1]
    assert graph.y.tolist() == [0, 1, 2, 1, -1] and int(graph.train_mask.sum()) == 2


def test_ogb_without_features_labels_or_split_gets_defaults(tmp_path):
    data = read_ogb(write_ogb(tmp_path / "d", labels=None, split_scheme=None, features=False))
    assert np.array_equal(data.x, np.ones((5, 1), np.float32)) and data.y.tolist() == [-1] * 5
    assert data.split is None and not any(m.any() for m in data.masks.values())


def test_ogb_several_split_schemes_need_a_choice(tmp_path):
    root = write_ogb(tmp_path / "d")
    write(f"{root}/split/random/train.csv.gz", "4\n", gz=True)
    with pytest.raises(ValueError, match="several split schemes \\(random, time\\); choose one with --split"):
        read_ogb(root)
    assert read_ogb(root, split="random").masks["train_mask"].tolist() == [False] * 4 + [True]
    with pytest.raises(FileNotFoundError, match="no split scheme 'nope'; found random, time"):
        read_ogb(root, split="nope")


def test_ogb_label_file_shorter_than_node_count(tmp_path):
    root = write_ogb(tmp_path / "d", labels="0\n1\n2\n")
    with pytest.raises(ValueError, match=r"raw/node-label.csv.gz: 3 label rows but num-node-list says 5 nodes"):
        read_ogb(root)


def test_ogb_label_file_longer_than_node_count(tmp_path):
    root = write_ogb(tmp_path / "d", labels="0\n1\n2\n1\n0\n2\n")
    with pytest.raises(ValueError, match=r"node-label.csv.gz, line 6: more label rows than the 5 nodes"):
        read_ogb(root)


def test_ogb_bad_label_value_names_the_line(tmp_path):
    root = write_ogb(tmp_path / "d", labels="0\n1\n2.5\n1\n0\n")
    with pytest.raises(ValueError, match=r"node-label.csv.gz, line 3: label 2.5 is not a class id"):
        read_ogb(root)


def test_ogb_split_index_out_of_range(tmp_path):
    root = write_ogb(tmp_path / "d")
    write(f"{root}/split/time/valid.csv.gz", "2\n4\n5\n", gz=True)
    with pytest.raises(ValueError, match=r"split/time/valid.csv.gz, line 3: node index 5 is not in \[0, 5\)"):
        read_ogb(root)


def test_ogb_edge_with_non_numeric_token(tmp_path):
    root = write_ogb(tmp_path / "d")
    write(f"{root}/raw/edge.csv.gz", "0,1\n1,2\n2,zero\n", gz=True)
    with pytest.raises(ValueError, match=r"raw/edge.csv.gz, line 3: 'zero' is not an integer"):
        read_ogb(root)


def test_ogb_edge_with_negative_or_too_large_id(tmp_path):
    root = write_ogb(tmp_path / "d")
    write(f"{root}/raw/edge.csv.gz", "0,1\n-1,2\n", gz=True)
    with pytest.raises(ValueError, match=r"raw/edge.csv.gz, line 2: node id -1 is not in \[0, 5\)"):
        read_ogb(root)
    write(f"{root}/raw/edge.csv.gz", "0,1\n1,7\n", gz=True)
    with pytest.raises(ValueError, match=r"raw/edge.csv.gz, line 2: node id 7 is not in \[0, 5\)"):
        read_ogb(root)


def test_ogb_feature_rows_must_match(tmp_path):
    root = write_ogb(tmp_path / "d")
    write(f"{root}/raw/node-feat.csv.gz", "1,2,3\n4,5\n", gz=True)
    with pytest.raises(ValueError, match=r"raw/node-feat.csv.gz, line 2: expected 3 values, found 2"):
        read_ogb(root)
    write(f"{root}/raw/node-feat.csv.gz", "1,2,3\n4,5,6\n", gz=True)
    with pytest.raises(ValueError, match=r"raw/node-feat.csv.gz: 2 feature rows but num-node-list says 5 nodes"):
        read_ogb(root)


def test_ogb_truncated_gzip_names_the_file(tmp_path):
    root = write_ogb(tmp_path / "d")
    path = f"{root}/raw/node-feat.csv.gz"
    write(path, "".join(f"{i},{i},{i}\n" for i in range(5)) * 1, gz=True)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-12])
    with pytest.raises(ValueError, match=r"raw/node-feat.csv.gz: truncated or corrupt gzip file"):
        read_ogb(root)


def test_ogb_missing_edge_file(tmp_path):
    root = write_ogb(tmp_path / "d")
    os.remove(f"{root}/raw/num-node-list.csv.gz")
    with pytest.raises(FileNotFoundError, match="missing raw/num-node-list.csv.gz"):
        read_ogb(root)


# ---------------------------------------------------------------- format detection and read_graph


def test_detect_format(tmp_path):
    assert detect_format(write(tmp_path / "a.txt.gz", "", gz=True)) == "edgelist"
    assert detect_format(str(tmp_path / "b.CSV")) == "edgelist"
    assert detect_format(str(tmp_path / "c.npz")) == "npz"
    with pytest.raises(ValueError, match="unknown input format"):
        detect_format(write(tmp_path / "d.bin", ""))
    with pytest.raises(ValueError, match="not an OGB node-property folder"):
        detect_format(str(tmp_path))


def test_read_graph_edge_list_defaults_and_cleanup(tmp_path):
    path = write(tmp_path / "g.txt", MESSY)
    result = read_graph(path, relabel=True, cleanup=CleanupOptions(symmetrize=True, dedup=True, drop_self_loops=True))
    graph = result.graph
    # relabelled edges 0->1 1->2 2->0 0->1 3->3 4->1; the loop goes, reverses come, the 0->1 copy goes
    assert graph.num_nodes == 5 and graph.num_edges == 8
    assert graph.rowptr.tolist() == [0, 2, 5, 7, 7, 8] and graph.col.tolist() == [1, 2, 0, 2, 4, 0, 1, 1]
    assert result.stats.self_loops_dropped == 1 and result.stats.reverse_edges_added == 5
    assert result.stats.duplicates_dropped == 2
    assert graph.x.shape == (5, 1) and bool((graph.x == 1).all()) and bool((graph.y == -1).all())
    assert not graph.train_mask.any()


def test_read_graph_edge_list_with_feature_and_label_files(tmp_path):
    path = write(tmp_path / "g.txt", "0 1\n1 2\n")
    np.save(tmp_path / "x.npy", np.arange(8, dtype=np.float64).reshape(4, 2))
    np.save(tmp_path / "y.npy", np.array([0, 1, 1, -1]))
    graph = read_graph(path, features=str(tmp_path / "x.npy"), labels=str(tmp_path / "y.npy")).graph
    assert graph.num_nodes == 4 and graph.x.dtype.is_floating_point and graph.y.tolist() == [0, 1, 1, -1]
    np.save(tmp_path / "short.npy", np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"short.npy: features must have shape \[N, F\] with N = 3"):
        read_graph(path, features=str(tmp_path / "short.npy"))


def test_read_graph_refuses_options_that_do_not_apply(tmp_path):
    root = write_ogb(tmp_path / "d")
    with pytest.raises(ValueError, match="apply to edge lists only"):
        read_graph(root, relabel=True)
    with pytest.raises(ValueError, match="applies to OGB folders only"):
        read_graph(write(tmp_path / "g.txt", "0 1\n"), split="time")
