"""Multi-label node tasks ([N, T] targets with missing labels): BCE over present pairs, mean
ROC-AUC; the loss on 2 ranks equals 1 rank for every strategy (the loss divides by present pairs)."""

import numpy as np

from dsgraph.graph import rmat_graph, save_npz
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, make_trainer

STRATEGIES = ("ag", "a2a", "halo", "ag_ring")


def _train(rank, world, tmp):
    out = {}
    for strategy in STRATEGIES if world > 1 else ("ag",):
        trainer = make_trainer(tmp, ds_config(stage=2), dataset=f"{tmp}/ml.npz", strategy=strategy, epochs=3, eval_every=1,
                               dropout=0.0, input_dropout=0.0)  # fmt: skip
        before = trainer.evaluate(-1)
        rows = [trainer.train_epoch(epoch) for epoch in range(3)]
        out[strategy] = {"loss": [r["loss"] for r in rows], "before": before, "after": trainer.evaluate(2)}
    if rank == 0:
        dump(tmp, f"ml{world}.json", out)


def test_multilabel_trains_on_every_strategy_like_one_rank(tmp_path):
    save_npz(rmat_graph("rmat:8:8:labels=16", seed=1), str(tmp_path / "ml.npz"))
    run(_train, 1, tmp_path)
    run(_train, 2, tmp_path)
    one, two = load(tmp_path, "ml1.json")["ag"], load(tmp_path, "ml2.json")
    assert one["before"]["metric"] == "rocauc" and 0.0 <= one["before"]["val_rocauc"] <= 1.0
    assert one["after"]["train_rocauc"] > one["before"]["train_rocauc"]
    for strategy, got in two.items():
        assert np.allclose(got["loss"], one["loss"], atol=1e-5), (strategy, got["loss"], one["loss"])
        assert np.isclose(got["after"]["val_rocauc"], one["after"]["val_rocauc"], atol=1e-5), strategy
