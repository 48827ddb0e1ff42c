"""A grid of model variants over several graphs, for choosing presets: ``python -m tools.reports.sweep
--grid GRID.json``. The grid names its graphs (a dataset with seeds, or every fixed split of a file) and
its variants (a config plus overrides, and why it is in the grid). Each cell (variant x graph) is one
``tools/reports/sweep.py`` run set, 1 rank by default; its per-run rows go into the results JSON, cell
by cell, so a grid runs in slices (``--max-cells``, ``--cells``) and a later run adds only what is
missing (``--rerun`` measures again). The page shows, per graph, the mean ± sample std of the test
value at the best validation evaluation, beside the published rows for that graph
(``dsgraph/tasks/published.py``).

A grid file::

    {"graphs": {"cora": {"dataset": "cora", "seeds": [0, 1, 2]},
                "chameleon": {"dataset": "{datasets}/heterophilous/chameleon_filtered.npz"}},
     "variants": {"gat": {"config": "ds_configs/cpu_quickstart.json", "why": "GAT's recipe",
                          "dsgraph": {"dropout": 0.5},
                          "deepspeed": {"optimizer": {"params": {"lr": 0.01}}}}}}

A variant's ``deepspeed`` object is merged into the config's DeepSpeed part (objects key by key);
its ``nprocs`` replaces ``--nprocs`` (isolated mode needs ranks to isolate).
A graph's ``epochs`` and ``metric`` override every variant's.
``{datasets}`` is ``--datasets`` (the shared datasets folder); a graph without ``seeds`` trains every
split its masks hold, on the config's seed.
"""

from __future__ import annotations

import datetime
import json
import os
import time

from dsgraph.tasks.published import published_rows

GRAPH_KEYS = {"dataset", "seeds", "epochs", "metric"}
VARIANT_KEYS = {"config", "why", "dsgraph", "deepspeed", "nprocs"}


def load_grid(path: str) -> dict:
    """The grid file, checked: unknown keys and missing configs are errors that name them."""
    with open(path) as f:
        grid = json.load(f)
    if set(grid) - {"graphs", "variants"} or not grid.get("graphs") or not grid.get("variants"):
        raise ValueError(f"{path}: a grid is an object with 'graphs' and 'variants' (and nothing else)")
    for kind, allowed in (("graphs", GRAPH_KEYS), ("variants", VARIANT_KEYS)):
        for name, entry in grid[kind].items():
            unknown = sorted(set(entry) - allowed)
            if unknown:
                raise ValueError(f"{path}: {kind} '{name}' has unknown key(s) {unknown}; valid: {sorted(allowed)}")
    for name, graph in grid["graphs"].items():
        if "dataset" not in graph:
            raise ValueError(f"{path}: graph '{name}' needs a 'dataset'")
    for name, variant in grid["variants"].items():
        if not os.path.exists(variant.get("config", "")):
            raise ValueError(f"{path}: variant '{name}' needs an existing 'config', got {variant.get('config')!r}")
    return grid


def plan_cells(grid: dict, results: dict, only: list[str] | None, rerun: bool) -> list[tuple[str, str]]:
    """(variant, graph) cells to measure: those named by ``only`` (``VARIANT/GRAPH``, either may be
    ``*``) or every cell, less those the results hold unless ``rerun``."""
    cells = [(v, g) for v in grid["variants"] for g in grid["graphs"]]
    if only:
        for pattern in only:
            if "/" not in pattern:
                raise ValueError(f"--cells takes VARIANT/GRAPH (either may be *), got {pattern!r}")
        cells = [(v, g) for v, g in cells if any(_matches(p, v, g) for p in only)]
    return [(v, g) for v, g in cells if rerun or f"{v}/{g}" not in results["cells"]]


def _matches(pattern: str, variant: str, graph: str) -> bool:
    want_v, want_g = pattern.split("/", 1)
    return want_v in ("*", variant) and want_g in ("*", graph)


def check_datasets(grid: dict, cells: list[tuple[str, str]], datasets: str) -> None:
    """Before any cell trains: ``--datasets`` must be a folder when a planned cell's graph reads
    ``{datasets}`` (a relative default such as ../shared/datasets names no folder from a worktree
    elsewhere; otherwise the error would come only when that cell starts, after the cells before it)."""
    reading = sorted({g for _, g in cells if "{datasets}" in grid["graphs"][g]["dataset"]})
    if reading and not os.path.isdir(datasets):
        raise ValueError(
            f"--datasets {datasets!r} is not a folder (from {os.getcwd()}), and graph(s) {', '.join(reading)} "
            "read {datasets}; pass the shared datasets folder, e.g. --datasets /path/to/shared/datasets"
        )


def measure_cell(grid: dict, variant: str, graph: str, datasets: str, nprocs: int) -> dict:
    """One cell's runs (``sweep.run_set``) and when and how long they took."""
    from tools.reports.sweep import run_set

    v, g = grid["variants"][variant], grid["graphs"][graph]
    overrides = {**v.get("dsgraph", {}), "dataset": g["dataset"].replace("{datasets}", datasets)}
    overrides.update({key: g[key] for key in ("epochs", "metric") if key in g})
    seeds = g.get("seeds")
    start = time.perf_counter()
    nprocs = v.get("nprocs", nprocs)
    rows = run_set(v["config"], overrides, seeds, nprocs, v.get("deepspeed", {}))
    return {
        "runs": rows,
        "measured": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round(time.perf_counter() - start, 1),
        "nprocs": nprocs,
    }


def cell_text(cell: dict | None) -> str:
    """'mean ± std' in % of the test value at the best validation evaluation, with the run count."""
    if cell is None:
        return "-"
    from tools.reports.sweep import summarise

    summary = summarise(cell["runs"])
    name = next(k for k in summary if k.startswith("test_") and k.endswith("_at_best_val"))
    s = summary[name]
    return f"{100 * s['mean']:.2f} ± {100 * s['std']:.2f} ({s['n']})"


def metric_of(grid: dict, results: dict, graph: str) -> str:
    """The metric a graph's cells report (the first measured cell's); before any is measured, the
    grid's ``metric`` for the graph, the published rows' metric, or '?'."""
    for key, cell in results["cells"].items():
        if key.split("/", 1)[1] == graph:
            return cell["runs"][0]["best"]["metric"]
    published = published_rows(grid["graphs"][graph]["dataset"])
    return grid["graphs"][graph].get("metric") or (published[0] if published else "?")


def table(grid: dict, results: dict) -> str:
    """Variants, then the published rows, as rows; the graphs as columns."""
    graphs = list(grid["graphs"])
    head = [f"{g} ({metric_of(grid, results, g)})" for g in graphs]
    lines = ["| variant | " + " | ".join(head) + " | from |", "| --- " * (len(graphs) + 2) + "|"]
    for name, variant in grid["variants"].items():
        cells = [cell_text(results["cells"].get(f"{name}/{g}")) for g in graphs]
        lines.append(f"| `{name}` | " + " | ".join(cells) + f" | {variant.get('why', '')} |")
    published = {g: published_rows(grid["graphs"][g]["dataset"]) for g in graphs}
    models = dict.fromkeys(m for found in published.values() if found for m, _, _ in found[1])
    for model in models:
        cells, sources = [], set()
        for g in graphs:
            row = next((r for r in (published[g] or ("", []))[1] if r[0] == model), None)
            cells.append("-" if row is None else f"{row[1]:.2f}")
            sources |= {row[2]} if row else set()
        lines.append(f"| published {model} | " + " | ".join(cells) + f" | {', '.join(sorted(sources))} |")
    return "\n".join(lines)


def run_grid(grid_path: str, results_path: str, page_path: str | None, options) -> int:
    """Measures the planned cells one by one (saving the results after each), then writes the table."""
    grid = load_grid(grid_path)
    results = {"cells": {}}
    if os.path.exists(results_path):  # its other keys (notes, partial runs) are kept
        with open(results_path) as f:
            results = json.load(f)
    results["grid"] = grid
    cells = plan_cells(grid, results, options.cells, options.rerun)
    if options.max_cells is not None:
        cells = cells[: options.max_cells]
    check_datasets(grid, cells, options.datasets)
    for variant, graph in cells:
        print(f"measuring {variant}/{graph} ...", flush=True)
        results["cells"][f"{variant}/{graph}"] = measure_cell(grid, variant, graph, options.datasets, options.nprocs)
        print(f"  {cell_text(results['cells'][f'{variant}/{graph}'])}", flush=True)
        with open(results_path, "w") as f:
            json.dump(results, f, indent=1)
    text = table(grid, results)
    print(text)
    if page_path:
        write_page(page_path, text)
    return 0


BEGIN, END = "<!-- sweep table: begin -->", "<!-- sweep table: end -->"


def write_page(path: str, text: str) -> None:
    """Puts the table between the page's markers (the prose around them is kept), or starts the page."""
    block = f"{BEGIN}\n{text}\n{END}"
    if os.path.exists(path):
        with open(path) as f:
            page = f.read()
        if BEGIN in page and END in page:
            page = page[: page.index(BEGIN)] + block + page[page.index(END) + len(END) :]
        else:
            page = page.rstrip("\n") + "\n\n" + block + "\n"
    else:
        page = f"# Model sweep\n\n{block}\n"
    with open(path, "w") as f:
        f.write(page)
