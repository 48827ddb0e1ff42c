"""early_stop_patience: training stops once that many evaluations in a row fail to beat the best
validation value, on every rank at the same epoch; the best evaluation stays the model selection."""

import json

import pytest

from dsgraph.train.config import DsgraphConfig
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, make_trainer, write_random_graph


def _frozen(rank, world, tmp):
    """lr 0: the model never changes, so no evaluation after the first improves on it."""
    ds = ds_config(stage=1)
    ds["optimizer"]["params"].update(lr=0.0, weight_decay=0.0)
    lines = []
    trainer = make_trainer(tmp, ds, epochs=20, eval_every=2, early_stop_patience=3, metrics_out=f"{tmp}/m{world}.jsonl")
    result = trainer.fit(log=lines.append)
    if rank == 0:
        dump(
            tmp,
            f"result{world}.json",
            {"stopped": result["stopped_early_at"], "best": result["best"]["epoch"], "lines": lines},
        )


@pytest.mark.slow
@pytest.mark.parametrize("world", [1, 2])
def test_training_stops_after_patience_evaluations_without_improvement(tmp_path, world):
    write_random_graph(str(tmp_path))
    run(_frozen, world, tmp_path)
    result = load(tmp_path, f"result{world}.json")
    assert result["best"] == 1  # the first evaluation (after epoch 1) is the best; the next three only equal it
    assert result["stopped"] == 7  # evaluations after epochs 3, 5 and 7 did not improve: stop there, not at 19
    with open(tmp_path / f"m{world}.jsonl") as f:
        epochs = [row["epoch"] for row in map(json.loads, f) if row["kind"] == "step"]
    assert epochs == list(range(8))
    assert any(line.startswith("early stop after epoch 7: 3 evaluations") for line in result["lines"])


def test_patience_must_not_be_negative():
    with pytest.raises(ValueError, match="'early_stop_patience' must be >= 0"):
        DsgraphConfig(early_stop_patience=-1)
