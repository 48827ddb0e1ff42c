"""Sampled training's memory from a partition store, predicted before training
(``dsgraph/modes/sampled/batch_memory.py``): the plan's batch, drawn from every part in one process,
is the whole-graph sampler's batch of the same seeds; the prediction holds its terms; a run over its
limit is refused with smaller batches or more ranks."""

import json

import numpy as np
import pytest

from dsgraph.agp.run_memory import LIMIT_ENV
from dsgraph.graph.store import read_meta
from dsgraph.modes.registry import MODES
from dsgraph.modes.sampled import NeighborSampler, batch_key
from dsgraph.modes.sampled.batch_memory import _EveryPartHere, one_batch, predict_sampled
from dsgraph.train.config import DsgraphConfig
from tests.graphs import random_graph
from tests.modes.sampled.test_store_sampling import FANOUTS, SEED, write_uneven_store


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    graph = random_graph(num_nodes=400, num_edges=3000, seed=7)
    path = str(tmp_path_factory.mktemp("sampled") / "store")
    write_uneven_store(graph, 2, path)
    return graph, path


def _cfg(path: str, **sampled) -> DsgraphConfig:
    section = {"fanouts": FANOUTS, "batch_size": 40, **sampled}
    return DsgraphConfig.from_dict(
        {"mode": "sampled", "partitions": path, "hidden": 16, "heads": 2, "sampled": section}
    )


def test_the_plans_batch_is_the_whole_graph_samplers_batch(store):
    graph, path = store
    every_part = _EveryPartHere(path, FANOUTS, self_loops=True)
    seeds = np.array([3, 50, 51, 120, 399])  # original ids
    new_of = np.argsort(np.asarray(every_part.perm))  # original -> relabelled
    key = batch_key(SEED, 0, 0)
    planned, _ = every_part.sample(seeds, new_of[seeds], key)
    whole = NeighborSampler(graph.rowptr, graph.col, FANOUTS, self_loops=True).sample(seeds, key)
    assert planned.num_nodes == whole.num_nodes and planned.num_edges == whole.num_edges
    assert np.array_equal(planned.node_ids.numpy(), whole.node_ids.numpy())
    assert np.array_equal(planned.col.numpy(), whole.col.numpy())


def test_the_prediction_holds_the_batch_the_part_and_what_evaluation_keeps(store):
    _, path = store
    cfg = _cfg(path)
    predicted = predict_sampled(cfg, 4, 2)
    batch = one_batch(path, tuple(FANOUTS), 20, cfg.seed, True)
    assert batch.seeds == 20 and batch.nodes > batch.seeds and batch.edges >= batch.nodes
    assert f"{batch.nodes:,} nodes and {batch.edges:,} edges" in predicted.source
    terms = predicted.terms
    assert predict_sampled(_cfg(path, prefetch_depth=0), 4, 2).terms["batches prepared ahead"] == 0
    meta = read_meta(path)
    assert terms["own part (as read)"] > 8 * meta["num_nodes"]  # the permutation and a part
    assert terms["training ids"] == 32 * batch.train_rows > 0 and terms["evaluation outputs"] > 0
    assert predicted.total_bytes == pytest.approx(sum(terms.values()))
    assert predict_sampled(cfg, 4, 4) is None  # 2 parts, 4 ranks: the run refuses it itself
    assert predict_sampled(DsgraphConfig.from_dict({"mode": "sampled"}), 4, 2) is None  # whole graph


def test_a_run_over_its_limit_is_refused_with_smaller_batches(store, monkeypatch):
    _, path = store
    cfg = _cfg(path)
    predicted = predict_sampled(cfg, 4, 2).total_mb
    monkeypatch.setenv(LIMIT_ENV, str(predicted - 0.01))
    with pytest.raises(ValueError) as err:
        MODES["sampled"].fit_memory(cfg, {}, 2)
    message = str(err.value)
    assert f"predicted to peak at {predicted:,.0f} MB per rank (sampled on 2 ranks, store {path}" in message
    assert '"batch_size": 20: about' in message
    monkeypatch.setenv(LIMIT_ENV, str(predicted + 1))
    assert MODES["sampled"].fit_memory(cfg, {}, 2) == (cfg, "")


def test_plan_prints_a_sampled_runs_terms(store, tmp_path, capsys):
    from dsgraph.cli import main

    _, path = store
    config = tmp_path / "ds.json"
    section = {"mode": "sampled", "hidden": 16, "heads": 2, "sampled": {"fanouts": FANOUTS, "batch_size": 40}}
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "dsgraph": section}))
    assert main(["plan", "--config", str(config), "--world-size", "2", "--partitions", path]) == 0
    out = capsys.readouterr().out
    assert "memory per rank of sampled on 2 ranks (fp32" in out and "own part (as read)" in out
