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
