"""Isolated (Grappa) training through the DeepSpeed engine on 2 ranks: finite losses, the neighbour
chunk rotates, training steps move no activations through dsgraph's comm layer (evaluation does),
evaluation covers the full graph, and prefetching the next chunk does not change the result."""

import json
import math

import pytest
import torch

from dsgraph.graph import load_npz
from dsgraph.graph.rank_graph import whole_graph
from dsgraph.train.sampled import local_attention
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.trainer import Trainer
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, write_random_graph

SETTINGS = dict(hidden=32, heads=4, layers=2, self_loops=True, seed=3, strategy="isolated", isolated_chunks=4,
                repart_every=2, epochs=6, eval_every=3)  # fmt: skip


def _trainer(tmp, **cfg):
    settings = dict(SETTINGS, dataset=write_random_graph(tmp), **cfg)
    return Trainer(DsgraphConfig(**settings), ds_config(stage=2), torch.device("cpu"), log=lambda line: None)


def _full_graph_accuracy(trainer, path):
    """Test accuracy of the trained module on the whole graph in one process (no ranks involved)."""
    graph = load_npz(path).with_self_loops()
    attention = local_attention(whole_graph(graph), backend="reference")
    module = trainer.engine.module.eval()
    with torch.no_grad():
        pred = module(graph.x, attention, torch.arange(graph.num_nodes), 0).argmax(1)
    mask = graph.test_mask
    return float((pred[mask] == graph.y[mask]).float().mean())


def _train(rank, world, tmp):
    trainer = _trainer(tmp, isolated_correction="coverage")
    before = [p.detach().clone() for p in trainer.engine.module.parameters()]
    steps, evals = [], []
    for epoch in range(SETTINGS["epochs"]):
        steps.append(trainer.train_epoch(epoch))
        if (epoch + 1) % SETTINGS["eval_every"] == 0:
            evals.append(trainer.evaluate(epoch))
    trainer.close()
    assert all(math.isfinite(r["loss"]) and r["loss"] > 0 for r in steps)
    assert all(r["comm_bytes"] == 0 and r["comm_time_s"] == 0.0 for r in steps)  # no activation traffic
    assert all(r["comm_bytes"] > 0 for r in evals)  # the full-graph evaluation path does move activations
    assert [r["super_epoch"] for r in steps] == [0, 0, 1, 1, 2, 2]
    primary = [2 * rank, 2 * rank + 1]
    assert [r["chunks"] for r in steps[::2]] == [primary + [(2 * rank + 2) % 4], primary + [(2 * rank + 3) % 4],
                                                 primary + [(2 * rank + 2) % 4]]  # fmt: skip
    assert [s for s, _, _ in trainer.mode.switch_times] == [0, 1, 2]
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, trainer.engine.module.parameters()))
    graph_path = write_random_graph(tmp)
    assert abs(evals[-1]["test_acc"] - _full_graph_accuracy(trainer, graph_path)) < 1e-6  # evaluated on the full graph
    if rank == 0:
        dump(tmp, "prefetch_on.json", [r["loss"] for r in steps])

    metrics = f"{tmp}/no_prefetch.jsonl"
    _trainer(tmp, isolated_correction="coverage", isolated_prefetch=False, metrics_out=metrics).fit(log=lambda line: None)
    if rank == 0:
        with open(metrics) as f:
            dump(tmp, "prefetch_off.json", [row["loss"] for row in map(json.loads, f) if row["kind"] == "step"])


def test_isolated_training_on_two_ranks(tmp_path):
    write_random_graph(str(tmp_path))
    run(_train, 2, tmp_path)
    on, off = load(tmp_path, "prefetch_on.json"), load(tmp_path, "prefetch_off.json")
    assert len(on) == 6 and on == off  # loading ahead in a thread changes nothing but the timing


@pytest.mark.parametrize(
    "section, message",
    [
        ({"isolated_correction": "exact"}, r"'isolated_correction' must be one of coverage, resample, uniform, none"),
        ({"chunk_method": "balanced"}, r"'chunk_method' must be one of random, metis"),
        ({"repart_every": 0}, r"'repart_every' >= 1"),
        ({"isolated_chunks": -2}, r"'isolated_chunks' must be >= 0"),
        ({"strategy": "isolated", "partitions": "some/dir"}, r"mode 'isolated' writes its own chunk store"),
    ],
)
def test_isolated_config_errors(section, message):
    with pytest.raises(ValueError, match=message):
        DsgraphConfig.from_dict(section)
