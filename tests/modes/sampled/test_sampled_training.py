"""Strategy 'sampled' through DeepSpeed: 1 and 2 ranks take the same steps; metrics rows; config."""

import json
import math
import os

import pytest
import torch

from dsgraph.train.config import DsgraphConfig
from dsgraph.train.metrics import STEP_KEYS
from dsgraph.train.trainer import Trainer
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, write_random_graph

SAMPLED_KEYS = ("sampled_nodes_before_dedup", "sampled_nodes_after_dedup", "queue_wait_s", "cache_hit_rate")


GLOBAL_MODEL = dict(block="transformer", input_projection=True, norm="pre", head="linear", global_attention="linear")


def _fit(rank, world, tmp, model=None):
    cfg = DsgraphConfig.from_dict(
        dict(
            model=model or {},
            dataset=write_random_graph(tmp),
            strategy="sampled",
            hidden=32,
            heads=4,
            layers=2,
            seed=3,
            sampled=dict(fanouts=[3, 3], batch_size=16, prefetch_depth=2, cache_fraction=0.2, feature_dtype="bfloat16"),
            epochs=4,
            eval_every=2,
            metrics_out=os.path.join(tmp, f"metrics_{world}.jsonl"),
        )
    )
    trainer = Trainer(cfg, ds_config(stage=2), torch.device("cpu"), log=lambda line: None)
    result = trainer.fit(log=lambda line: None)
    if rank == 0:
        dump(tmp, f"result_{world}.json", result)


@pytest.mark.slow
@pytest.mark.parametrize(
    "model",
    [pytest.param(None, id="default", marks=pytest.mark.smoke), pytest.param(GLOBAL_MODEL, id="global-attention")],
)
def test_sampled_training_on_one_and_two_ranks_takes_the_same_steps(tmp_path, model):
    """With global attention too: it spans the global batch's seeds, whose sums are all-reduced."""
    write_random_graph(str(tmp_path))
    for world in (1, 2):
        run(_fit, world, tmp_path, model)
    rows = {}
    for world in (1, 2):
        with open(tmp_path / f"metrics_{world}.jsonl") as f:
            rows[world] = [json.loads(line) for line in f]
    steps = {w: [r for r in rows[w] if r["kind"] == "step"] for w in rows}
    assert len(steps[1]) == len(steps[2]) == 4 * 4  # 53 training nodes: batches of 16, 16, 16, 5
    for row in steps[2]:
        assert set(STEP_KEYS) | set(SAMPLED_KEYS) <= set(row)
        assert 0 < row["sampled_nodes_after_dedup"] <= row["sampled_nodes_before_dedup"]
        assert 0.0 <= row["cache_hit_rate"] <= 1.0 and row["queue_wait_s"] >= 0.0
    losses = {w: [r["loss"] for r in steps[w]] for w in steps}
    assert all(math.isfinite(x) for x in losses[2])
    for got, want in zip(losses[2], losses[1]):  # seeds' sampled trees and dropout masks do not depend on ranks
        assert abs(got - want) <= 1e-4 * max(1.0, abs(want)), (losses[2], losses[1])
    assert sum(losses[2][-4:]) < sum(losses[2][:4])  # it learns
    evals = [r for r in rows[2] if r["kind"] == "eval"]
    assert [r["epoch"] for r in evals] == [1, 3] and all(0.0 <= r["test_acc"] <= 1.0 for r in evals)
    assert load(tmp_path, "result_2.json")["last"]["test_acc"] == evals[-1]["test_acc"]


APPNP_MODEL = dict(propagation_steps=3, propagation_alpha=0.2)


@pytest.mark.slow
def test_sampled_training_with_appnp_propagation(tmp_path):
    """``model.propagation_steps`` propagates the logits over the rank's sampled subgraph (as APPNP on
    a NeighborLoader batch; like block 'gcn', its degrees there depend on how the seeds split over the
    ranks, so 2 ranks are not compared with 1): 2 ranks train with finite losses, and evaluate."""
    write_random_graph(str(tmp_path))
    run(_fit, 2, tmp_path, APPNP_MODEL)
    with open(tmp_path / "metrics_2.jsonl") as f:
        rows = [json.loads(line) for line in f]
    losses = [r["loss"] for r in rows if r["kind"] == "step"]
    assert len(losses) == 4 * 4 and all(math.isfinite(x) for x in losses)
    evals = [r for r in rows if r["kind"] == "eval"]
    assert [r["epoch"] for r in evals] == [1, 3] and all(0.0 <= r["test_acc"] <= 1.0 for r in evals)


def test_sampled_config_is_checked():
    DsgraphConfig.from_dict({"strategy": "sampled", "layers": 3, "fanouts": [5, 5, 5]})  # the older top-level spelling
    assert DsgraphConfig.from_dict({"sampled": {"fanouts": [4, 4]}}).sampled.fanouts == [4, 4]
    with pytest.raises(ValueError, match="one entry per layer"):
        DsgraphConfig.from_dict({"mode": "sampled", "layers": 3, "sampled": {"fanouts": [5, 5]}})
    with pytest.raises(ValueError, match="fanouts"):
        DsgraphConfig.from_dict({"fanouts": [5, "5"]})
    with pytest.raises(ValueError, match="feature_dtype"):
        DsgraphConfig.from_dict({"sampled": {"feature_dtype": "float16"}})
    with pytest.raises(ValueError, match="prefetch_depth"):
        DsgraphConfig.from_dict({"prefetch_depth": -1})
    with pytest.raises(ValueError, match="'batch_size' and 'sampled.batch_size' are the same setting"):
        DsgraphConfig.from_dict({"batch_size": 8, "sampled": {"batch_size": 8}})
    with pytest.raises(ValueError, match="unknown key.*'fanout'.*valid keys: fanouts"):
        DsgraphConfig.from_dict({"sampled": {"fanout": [5, 5]}})
