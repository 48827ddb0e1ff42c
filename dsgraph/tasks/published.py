"""Published results for datasets users are likely to train, so that a run (and the sweep,
``tools/reports/sweep.py``) can print them beside its own figure: ``published_rows("cora")``.

Every figure is the test value in % (mean over the paper's runs) of the metric named with it, on the
split the paper used; a row is comparable with a dsgraph run only on that split and metric. Sources:

- Cora (Planetoid split): Kipf and Welling, ICLR 2017 (GCN 81.5); Velickovic et al., ICLR 2018 (GAT 83.0).
- chameleon/squirrel filtered and the five graphs of Platonov et al., "A critical look at the
  evaluation of GNNs under heterophily", ICLR 2023, ten fixed splits: the five graphs from the
  repository's results notebook (yandex-research/heterophilous-graphs, notebooks/results.ipynb); the
  filtered graphs from the paper's table of the standard GNNs.
- ``*`` rows: Luo, Shi and Wu, "Classic GNNs are strong baselines", NeurIPS 2024 (tuned GCN, SAGE and
  GAT with residuals, normalisation and dropout; their repository LUOyk1999/tunedGNN,
  medium_graph/README.md, on the same filtered graphs and splits; their Cora figures are for another
  split and are not listed); Polynormer: Deng et al., ICLR 2024, as Luo et al. list it.
"""

from __future__ import annotations

import os

_PLATONOV = "Platonov et al. 2023"
_LUO = "Luo et al. 2024"

PUBLISHED: dict[str, tuple[str, list[tuple[str, float, str]]]] = {
    "cora": ("accuracy", [("GCN", 81.5, "Kipf & Welling 2017"), ("GAT", 83.0, "Velickovic et al. 2018")]),
    "chameleon_filtered": (
        "accuracy",
        [
            ("GCN", 40.89, _PLATONOV),
            ("SAGE", 37.77, _PLATONOV),
            ("GAT", 39.21, _PLATONOV),
            ("GAT-sep", 39.26, _PLATONOV),
            ("GT", 38.87, _PLATONOV),
            ("GT-sep", 40.31, _PLATONOV),
            ("GCN*", 46.29, _LUO),
            ("SAGE*", 44.81, _LUO),
            ("GAT*", 44.13, _LUO),
        ],
    ),
    "squirrel_filtered": (
        "accuracy",
        [
            ("GCN", 39.47, _PLATONOV),
            ("SAGE", 36.09, _PLATONOV),
            ("GAT", 35.62, _PLATONOV),
            ("GAT-sep", 35.46, _PLATONOV),
            ("GT", 36.30, _PLATONOV),
            ("GT-sep", 36.66, _PLATONOV),
            ("GCN*", 45.01, _LUO),
            ("SAGE*", 40.78, _LUO),
            ("GAT*", 41.73, _LUO),
        ],
    ),
    "roman_empire": (
        "accuracy",
        [
            ("SAGE", 85.74, _PLATONOV),
            ("GAT-sep", 88.75, _PLATONOV),
            ("GT-sep", 87.32, _PLATONOV),
            ("GCN*", 91.27, _LUO),
            ("SAGE*", 91.06, _LUO),
            ("GAT*", 90.63, _LUO),
        ],
    ),
    "amazon_ratings": (
        "accuracy",
        [
            ("SAGE", 53.63, _PLATONOV),
            ("GAT-sep", 52.70, _PLATONOV),
            ("GCN*", 53.80, _LUO),
            ("SAGE*", 55.40, _LUO),
            ("GAT*", 55.54, _LUO),
        ],
    ),
    "minesweeper": (
        "rocauc",
        [
            ("SAGE", 93.51, _PLATONOV),
            ("GAT-sep", 93.91, _PLATONOV),
            ("GT-sep", 92.29, _PLATONOV),
            ("GCN*", 97.86, _LUO),
            ("SAGE*", 97.77, _LUO),
            ("GAT*", 97.73, _LUO),
            ("Polynormer", 97.46, _LUO),
        ],
    ),
    "tolokers": (
        "rocauc",
        [("GAT", 83.70, _PLATONOV), ("GAT-sep", 83.78, _PLATONOV), ("Polynormer", 85.91, _LUO)],
    ),
    "questions": (
        "rocauc",
        [
            ("GT", 77.95, _PLATONOV),
            ("GT-sep", 78.05, _PLATONOV),
            ("GCN*", 79.02, _LUO),
            ("SAGE*", 77.21, _LUO),
            ("GAT*", 77.95, _LUO),
        ],
    ),
}


def dataset_key(dataset: str) -> str:
    """The table's name for a dataset spec: a file's stem, lower case, '-' as '_' ('cora',
    '.../chameleon_filtered.npz' -> 'chameleon_filtered', 'roman-empire.npz' -> 'roman_empire')."""
    stem = os.path.basename(dataset)
    if stem.endswith(".npz"):
        stem = stem[: -len(".npz")]
    return stem.lower().replace("-", "_")


def published_rows(dataset: str) -> tuple[str, list[tuple[str, float, str]]] | None:
    """(metric, [(model, test value in %, source), ...]) for a known dataset, else None."""
    return PUBLISHED.get(dataset_key(dataset))


def published_line(dataset: str) -> str | None:
    """One line for a run's end: 'published (accuracy, test %): GCN 81.5, GAT 83.0 (...)', or None."""
    found = published_rows(dataset)
    if found is None:
        return None
    metric, rows = found
    sources = ", ".join(dict.fromkeys(source for _, _, source in rows))
    return f"published ({metric}, test %): " + ", ".join(f"{m} {v:.2f}" for m, v, _ in rows) + f" ({sources})"
