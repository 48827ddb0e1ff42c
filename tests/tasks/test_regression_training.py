"""Node regression trains on 1, 2 and 4 ranks with the 1-rank losses and metrics, for every strategy,
on a graph whose 103 rows split unevenly; targets [N] and [N, T]. ``dsgraph predict`` exports its
predictions in the dataset's order, equal to the trainer's outputs on any number of ranks."""

import numpy as np
import pytest
import torch

from dsgraph.graph import Graph, save_npz
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.inference import Inference
from tests.distributed import run
from tests.graphs import random_graph
from tests.train.helpers import ds_config, dump, load, make_trainer

pytestmark = pytest.mark.slow

STRATEGIES = ("ag", "a2a", "halo", "ag_ring", "auto")
SETTINGS = {"task": "regression", "epochs": 3, "eval_every": 1, "dropout": 0.0, "input_dropout": 0.0}


def regression_graph(targets: int = 0) -> Graph:
    """``random_graph`` (103 nodes, a hub, rows without in-edges) with a continuous target: [N], or
    [N, targets] with ``targets``, a function of the node's features and its in-neighbours'."""
    g = random_graph(seed=4)
    rng = np.random.default_rng(5)
    w = rng.standard_normal((g.num_features, max(targets, 1)))
    s = g.x.numpy().astype(np.float64) @ w
    src, dst = g.col.numpy().astype(np.int64), np.repeat(np.arange(g.num_nodes), g.in_degrees().numpy())
    deg = np.maximum(np.bincount(dst, minlength=g.num_nodes), 1)[:, None]
    y = s + np.stack([np.bincount(dst, weights=s[src, t], minlength=g.num_nodes) for t in range(s.shape[1])], 1) / deg
    y = (y if targets else y[:, 0]).astype(np.float32)
    masks = {"train_mask": g.train_mask.numpy(), "val_mask": g.val_mask.numpy(), "test_mask": g.test_mask.numpy()}
    return Graph.from_edges(src, dst, x=g.x.numpy(), y=y, **masks, num_nodes=g.num_nodes, continuous=True)


def _write(tmp):
    save_npz(regression_graph(), f"{tmp}/reg.npz")
    save_npz(regression_graph(targets=3), f"{tmp}/reg3.npz")


def _train(rank, world, tmp):
    out = {}
    runs = [(s, "reg") for s in (STRATEGIES if world > 1 else ("ag",))] + [("ag", "reg3")]
    for strategy, data in runs:
        trainer = make_trainer(tmp, ds_config(stage=2), dataset=f"{tmp}/{data}.npz", strategy=strategy, **SETTINGS)
        rows = [trainer.train_epoch(epoch) for epoch in range(3)]
        after = trainer.evaluate(2)
        out[f"{strategy}/{data}"] = {"loss": [r["loss"] for r in rows], "after": after}
        trainer.close()
    if rank == 0:
        dump(tmp, f"reg{world}.json", out)


def test_regression_trains_on_every_strategy_like_one_rank(tmp_path):
    _write(tmp_path)
    for world in (1, 2, 4):
        run(_train, world, tmp_path)
    one = load(tmp_path, "reg1.json")
    ref = one["ag/reg"]
    assert ref["after"]["metric"] == "mse" and ref["loss"][-1] < ref["loss"][0]
    assert ref["after"]["loss"] == pytest.approx(ref["after"]["train_mse"])
    for world in (2, 4):
        got = load(tmp_path, f"reg{world}.json")
        for key, result in got.items():
            want = one["ag/" + key.split("/")[1]]
            assert np.allclose(result["loss"], want["loss"], atol=1e-5, rtol=0), (
                world,
                key,
                result["loss"],
                want["loss"],
            )
            for name in ("val_mse", "test_mae", "test_r2"):
                assert np.isclose(result["after"][name], want["after"][name], atol=1e-5, rtol=0), (world, key, name)


def _fit(rank, world, tmp):
    trainer = make_trainer(tmp, ds_config(stage=2), **_settings(tmp))
    last = trainer.fit(log=lambda line: None)["last"]
    trainer.engine.eval()
    batch = trainer.mode.eval_batch()
    with torch.no_grad():
        out = trainer.engine(batch.x, batch.attention, batch.node_ids, 0).float()
    np.savez(f"{tmp}/ref_rank{rank}.npz", ids=batch.node_ids.numpy(), out=out.numpy())
    if rank == 0:
        dump(tmp, "last.json", last)


def _settings(tmp):
    return dict(SETTINGS, dataset=f"{tmp}/reg.npz", checkpoint_every=3, checkpoint_dir=f"{tmp}/ck")


def _predict(rank, world, tmp, strategy):
    settings = {"hidden": 32, "heads": 4, "layers": 2, "self_loops": False, "seed": 3}
    cfg = DsgraphConfig.from_dict({**settings, **_settings(tmp), "strategy": strategy})
    inference = Inference(cfg, torch.device("cpu"), cfg.checkpoint_dir, None, log=lambda line: None)
    described = inference.write(f"{tmp}/pred{world}_{strategy}.npz")
    metrics = inference.metrics()
    if rank == 0:
        dump(tmp, f"metrics{world}.json", {**metrics, "described": described})


def test_predict_exports_regression_outputs(tmp_path):
    _write(tmp_path)
    run(_fit, 2, tmp_path)
    parts = [np.load(f"{tmp_path}/ref_rank{r}.npz") for r in range(2)]
    ref = np.empty((103, 1), np.float32)
    ref[np.concatenate([p["ids"] for p in parts])] = np.concatenate([p["out"] for p in parts])
    last = load(tmp_path, "last.json")
    for world, strategy in ((1, "ag"), (2, "a2a")):
        run(_predict, world, tmp_path, strategy)
        with np.load(f"{tmp_path}/pred{world}_{strategy}.npz") as pred:
            assert set(pred.files) == {"predictions", "embeddings", "train_mask", "val_mask", "test_mask"}
            assert pred["predictions"].shape == (103,) and pred["embeddings"].shape == (103, 32)
            assert np.abs(pred["predictions"] - ref[:, 0]).max() <= 1e-5, (world, strategy)
        metrics = load(tmp_path, f"metrics{world}.json")
        assert metrics["described"] == "predictions [103], embeddings [103, 32], masks [103]"
        assert metrics["metric"] == "mse" and abs(metrics["test_mse"] - last["test_mse"]) <= 1e-6
