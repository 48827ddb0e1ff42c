"""Predictions from a checkpoint equal the logits the trainer evaluated, at any world size, from
ZeRO-2 and ZeRO-3 checkpoints; --eval-only reports the trainer's metrics."""

import numpy as np
import pytest
import torch

from dsgraph.train.config import DsgraphConfig
from dsgraph.train.inference import Inference
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, make_trainer, write_random_graph

pytestmark = pytest.mark.slow  # every test here starts processes

SETTINGS = dict(hidden=32, heads=4, layers=2, self_loops=False, seed=3, epochs=3, eval_every=3, checkpoint_every=3)


def _settings(tmp, stage):
    return dict(SETTINGS, dataset=write_random_graph(tmp), checkpoint_dir=f"{tmp}/ck{stage}")


def _train(rank, world, tmp, stage):
    trainer = make_trainer(tmp, ds_config(stage=stage), **_settings(tmp, stage))
    last = trainer.fit(log=lambda line: None)["last"]
    trainer.engine.eval()
    batch = trainer.mode.eval_batch()
    with torch.no_grad():
        logits = trainer.engine(batch.x, batch.attention, batch.node_ids, 0).float()
    np.savez(f"{tmp}/ref{stage}_rank{rank}.npz", ids=batch.node_ids.numpy(), logits=logits.numpy())
    if rank == 0:
        dump(tmp, f"last{stage}.json", last)


def _predict(rank, world, tmp, stage, strategy):
    cfg = DsgraphConfig.from_dict({**_settings(tmp, stage), "strategy": strategy})
    inference = Inference(cfg, torch.device("cpu"), cfg.checkpoint_dir, None, log=lambda line: None)
    inference.write(f"{tmp}/pred{stage}_{world}_{strategy}.npz")
    metrics = inference.metrics()
    if rank == 0:
        dump(tmp, f"metrics{stage}_{world}.json", metrics)


def _reference(tmp, stage, world):
    parts = [np.load(f"{tmp}/ref{stage}_rank{r}.npz") for r in range(world)]
    ids = np.concatenate([p["ids"] for p in parts])
    logits = np.concatenate([p["logits"] for p in parts])
    out = np.empty_like(logits)
    out[ids] = logits
    return out


def _check(tmp, stage, train_world, worlds_strategies):
    ref = _reference(tmp, stage, train_world)
    last = load(tmp, f"last{stage}.json")
    for world, strategy in worlds_strategies:
        run(_predict, world, tmp, stage, strategy)
        with np.load(f"{tmp}/pred{stage}_{world}_{strategy}.npz") as pred:
            assert np.abs(pred["logits"] - ref).max() <= 1e-5, (world, strategy)
            assert pred["embeddings"].shape == (ref.shape[0], 32)
            assert pred["test_mask"].sum() > 0
        metrics = load(tmp, f"metrics{stage}_{world}.json")
        assert abs(metrics["test_acc"] - last["test_acc"]) <= 1e-9 and metrics["epoch"] == 2


def test_predict_from_one_rank_checkpoint(tmp_path):
    run(_train, 1, tmp_path, 2)
    _check(tmp_path, 2, 1, [(1, "ag")])


def test_checkpoint_trained_on_two_ranks_predicts_on_one_two_and_four(tmp_path):
    run(_train, 2, tmp_path, 2)
    _check(tmp_path, 2, 2, [(2, "ag"), (1, "ag"), (4, "a2a")])


def test_predict_from_zero3_checkpoint(tmp_path):
    run(_train, 2, tmp_path, 3)
    _check(tmp_path, 3, 2, [(1, "ag")])
