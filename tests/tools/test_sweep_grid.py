"""The grid sweep's bookkeeping: which cells it measures, its table beside the published rows, its page."""

import json

import pytest

from tools.reports.sweep_grid import BEGIN, END, load_grid, plan_cells, table, write_page


def _grid(tmp_path, **extra):
    grid = {
        "graphs": {"cora": {"dataset": "cora", "seeds": [0, 1]}, "sq": {"dataset": "{datasets}/squirrel_filtered.npz"}},
        "variants": {
            "a": {"config": "ds_configs/cpu_quickstart.json", "why": "GAT's recipe"},
            "b": {"config": "ds_configs/cpu_general.json", "dsgraph": {"dropout": 0.5}},
        },
        **extra,
    }
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(grid))
    return str(path)


def _cell(tests, metric="accuracy"):
    return {
        "runs": [{"best": {"metric": metric, "val": t, "test": t, "epoch": 9}, "last": {"test_acc": t}} for t in tests]
    }


def test_plan_skips_measured_cells_and_follows_patterns(tmp_path):
    grid = load_grid(_grid(tmp_path))
    results = {"cells": {"a/cora": _cell([0.8, 0.82])}}
    assert plan_cells(grid, results, None, rerun=False) == [("a", "sq"), ("b", "cora"), ("b", "sq")]
    assert plan_cells(grid, results, ["*/cora"], rerun=False) == [("b", "cora")]
    assert plan_cells(grid, results, ["a/*"], rerun=True) == [("a", "cora"), ("a", "sq")]
    with pytest.raises(ValueError, match="VARIANT/GRAPH"):
        plan_cells(grid, results, ["a"], rerun=False)


def test_grid_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="unknown key"):
        load_grid(_grid(tmp_path, variants={"a": {"config": "ds_configs/cpu_quickstart.json", "lr": 1}}))
    with pytest.raises(ValueError, match="existing 'config'"):
        load_grid(_grid(tmp_path, variants={"a": {"config": "no/such.json"}}))


def test_a_missing_datasets_folder_fails_before_any_cell_trains(tmp_path):
    from types import SimpleNamespace

    from tools.reports.sweep_grid import run_grid

    results = tmp_path / "r.json"
    options = SimpleNamespace(cells=["a/sq"], rerun=False, max_cells=None, datasets=str(tmp_path / "no"), nprocs=1)
    with pytest.raises(ValueError, match=r"--datasets .* is not a folder.*graph\(s\) sq read \{datasets\}"):
        run_grid(_grid(tmp_path), str(results), None, options)
    assert not results.exists()
    options.cells = ["a/cora"]  # a cell whose graph needs no folder plans as before (nothing left: table only)
    results.write_text(json.dumps({"cells": {"a/cora": _cell([0.8])}}))
    assert run_grid(_grid(tmp_path), str(results), None, options) == 0


def test_table_puts_published_rows_beside_the_variants(tmp_path):
    grid = load_grid(_grid(tmp_path))
    text = table(grid, {"cells": {"a/cora": _cell([0.8, 0.82]), "b/sq": _cell([0.4, 0.4])}})
    assert "| `a` | 81.00 ± 1.41 (2) | - | GAT's recipe |" in text
    assert "| `b` | - | 40.00 ± 0.00 (2) |  |" in text
    assert "| published GAT | 83.00 | 35.62 |" in text
    assert "| published GT-sep | - | 36.66 |" in text
    assert "cora (accuracy)" in text and "sq (accuracy)" in table(grid, {"cells": {}})


def test_page_keeps_its_prose_around_the_table(tmp_path):
    page = tmp_path / "page.md"
    write_page(str(page), "T1")
    page.write_text(page.read_text().replace("# Model sweep", "# Model sweep\n\nprose") + "\nafter\n")
    write_page(str(page), "T2")
    text = page.read_text()
    assert "prose" in text and "after" in text and f"{BEGIN}\nT2\n{END}" in text and "T1" not in text


@pytest.mark.slow
def test_a_grid_cell_trains_and_lands_in_results_and_page(tmp_path):
    from types import SimpleNamespace

    from tools.reports.sweep_grid import run_grid

    grid = tmp_path / "grid.json"
    grid.write_text(
        json.dumps(
            {
                "graphs": {"cora": {"dataset": "cora", "seeds": [0], "epochs": 2}},
                "variants": {"het": {"config": "ds_configs/cpu_hetero.json", "why": "w"}},
            }
        )
    )
    results, page = tmp_path / "r.json", tmp_path / "p.md"
    options = SimpleNamespace(cells=None, rerun=False, max_cells=None, datasets=".", nprocs=1)
    assert run_grid(str(grid), str(results), str(page), options) == 0
    cell = json.loads(results.read_text())["cells"]["het/cora"]
    assert len(cell["runs"]) == 1 and cell["runs"][0]["seed"] == 0 and cell["nprocs"] == 1
    assert "| `het` | " in page.read_text() and "| published GAT | 83.00 |" in page.read_text()
    mtime = results.stat().st_mtime_ns
    run_grid(str(grid), str(results), None, options)  # nothing left to measure: the results stay as they are
    assert results.stat().st_mtime_ns == mtime
