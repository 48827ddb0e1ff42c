"""The configured metric is computed exactly over every rank's rows: 1 and 2 ranks agree."""

import numpy as np
import pytest

from dsgraph.graph import save_npz
from tests.distributed import run
from tests.graphs import random_graph
from tests.train.helpers import ds_config, dump, load, make_trainer

pytestmark = pytest.mark.slow  # every test here starts processes


CASES = (
    ("rocauc", "binary.npz"),
    ("f1_macro", "five.npz"),
    (None, "five.npz"),
    ("ap", "binary.npz"),
    (None, "binary.npz"),
)
DEFAULTS = {"five.npz": "accuracy", "binary.npz": "rocauc"}  # per task: multi-class, binary


def _evals(rank, world, tmp):
    out = {}
    for metric, data in CASES:
        trainer = make_trainer(tmp, ds_config(stage=2), dataset=f"{tmp}/{data}", metric=metric, epochs=2, eval_every=1)
        result = trainer.fit(log=lambda line: None)
        out[f"{metric}:{data}"] = result["last"]
    if rank == 0:
        dump(tmp, f"evals{world}.json", out)


def test_metric_is_exact_over_ranks(tmp_path):
    save_npz(random_graph(num_classes=2, seed=4), str(tmp_path / "binary.npz"))
    save_npz(random_graph(num_classes=5), str(tmp_path / "five.npz"))
    run(_evals, 1, tmp_path)
    run(_evals, 2, tmp_path)
    one, two = load(tmp_path, "evals1.json"), load(tmp_path, "evals2.json")
    for key, row in one.items():
        metric, data = key.split(":")
        metric = DEFAULTS[data] if metric == "None" else metric
        stem = "acc" if metric == "accuracy" else metric
        assert row["metric"] == metric
        for split in ("train", "val", "test"):
            assert np.isclose(row[f"{split}_{stem}"], two[key][f"{split}_{stem}"], atol=1e-6), (key, split)
            assert 0.0 <= row[f"{split}_{stem}"] <= 1.0
        assert f"best_val_{stem}" in row and f"test_{stem}_at_best_val" in row
