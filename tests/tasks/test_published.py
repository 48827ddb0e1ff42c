"""The published rows a run prints for a known dataset."""

from dsgraph.tasks.published import dataset_key, published_line, published_rows


def test_names_resolve_from_paths_and_spellings():
    assert dataset_key("/x/heterophilous/chameleon_filtered.npz") == "chameleon_filtered"
    assert dataset_key("roman-empire.npz") == "roman_empire"
    metric, rows = published_rows("cora")
    assert metric == "accuracy" and ("GAT", 83.0, "Velickovic et al. 2018") in rows


def test_line_names_metric_models_and_sources():
    line = published_line("/data/Minesweeper.npz")
    assert line.startswith("published (rocauc, test %): ") and "GAT-sep 93.91" in line and "Luo et al. 2024" in line
    assert published_line("rmat:12") is None


def test_a_run_from_a_store_is_compared_with_the_stores_dataset_not_the_configs(tmp_path):
    from dsgraph.modes.isolated.chunk_store import write_chunk_store
    from dsgraph.modes.isolated.chunks import assign_chunks
    from dsgraph.train.config import DsgraphConfig
    from dsgraph.train.trainer import _trained_dataset
    from tests.graphs import random_graph

    graph = random_graph()
    store = str(tmp_path / "store")
    write_chunk_store(graph, assign_chunks(graph, 2, "random", 0), 2, store, method="random", seed=0, dataset="rmat:9")
    assert _trained_dataset(DsgraphConfig.from_dict({"dataset": "cora", "partitions": store})) == "rmat:9"
    assert _trained_dataset(DsgraphConfig.from_dict({"dataset": "cora"})) == "cora"
