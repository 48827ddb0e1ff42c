"""Isolated training's memory from a partition store, predicted before training
(``dsgraph/modes/isolated/pair_memory.py``): the largest pair is counted as training cuts it, the
prediction is a one-rank step on it plus the pair read ahead, and a run over its limit is refused
with more chunks as the way out."""

import pytest
import torch

from dsgraph.agp.run_memory import LIMIT_ENV
from dsgraph.graph.store import read_meta
from dsgraph.modes.isolated.chunk_store import LoadSettings, write_chunk_store
from dsgraph.modes.isolated.chunks import RotationSchedule, assign_chunks
from dsgraph.modes.isolated.pair_memory import largest_pair, predict_isolated
from dsgraph.modes.isolated.store_pairs import StorePairs
from dsgraph.modes.registry import MODES
from dsgraph.train.config import DsgraphConfig
from tests.graphs import random_graph

CHUNKS = 6


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    graph = random_graph(num_nodes=301, num_edges=2400, seed=5)
    path = str(tmp_path_factory.mktemp("pairs") / "store")
    write_chunk_store(
        graph, assign_chunks(graph, CHUNKS, "random", 0), CHUNKS, path, method="random", seed=0, dataset="t"
    )
    return path


def _cfg(store: str, **isolated) -> DsgraphConfig:
    settings = {"halo_fraction": 0.1, "correction": "none", **isolated}
    return DsgraphConfig.from_dict(
        {"mode": "isolated", "partitions": store, "hidden": 16, "heads": 2, "isolated": settings}
    )


@pytest.mark.parametrize("halo_fraction, self_loops", [(0.1, True), (0.0, True), (0.3, False)])
def test_the_largest_pair_is_counted_as_training_loads_it(store, halo_fraction, self_loops):
    pair = largest_pair(store, halo_fraction, self_loops)
    edges = read_meta(store)["part_num_edges"]
    assert sorted(edges[c] for c in pair.chunks) == sorted(edges)[-2:]
    schedule = RotationSchedule(CHUNKS, 1)
    settings = LoadSettings("none", 2, halo_fraction, self_loops, 1, schedule.cycle_length, 0)
    loader = StorePairs(store, schedule, 0, settings, device=torch.device("cpu"), dtype=torch.float32)
    found = [(s, i) for s in range(schedule.cycle_length) for i, p in enumerate(loader.pairs(s)) if p == pair.chunks]
    assert found, "every pair meets once per cycle"
    data = loader.load(*found[0])
    assert data.graph.num_nodes == pair.rows + pair.halo and data.halo_read == pair.halo
    assert data.graph.block.num_edges == pair.edges


def test_the_prediction_is_a_one_rank_step_on_that_pair_plus_the_next_one_read_ahead(store):
    from dsgraph.agp.run_memory import predict_subgraph

    cfg = _cfg(store)
    predicted = predict_isolated(cfg, 4)
    pair = largest_pair(store, 0.1, cfg.adds_self_loops)
    assert f"parts {pair.chunks[0]} and {pair.chunks[1]}" in predicted.source
    meta = read_meta(store)
    sizes = (pair.rows + pair.halo, pair.edges, meta["num_features"], meta["num_classes"])
    alone = predict_subgraph(cfg, 4, *sizes, "", read_ahead=False)
    ahead = predicted.terms["read-ahead subgraph"]
    assert ahead == alone.terms["features"] + alone.terms["graph"] > 0
    assert predicted.total_bytes == pytest.approx(alone.total_bytes + ahead)
    assert "read-ahead subgraph" not in predict_isolated(_cfg(store, prefetch=False), 4).terms
    assert predict_isolated(DsgraphConfig.from_dict({"mode": "isolated"}), 4) is None  # in memory: not predicted


def test_a_run_over_its_limit_is_refused_with_more_chunks(store, monkeypatch):
    cfg = _cfg(store)
    memory = predict_isolated(cfg, 4)
    predicted, floor = memory.total_mb, (memory.terms["process floor"] + memory.terms["optimizer states"]) / 2**20
    monkeypatch.setenv(LIMIT_ENV, str(predicted - (predicted - floor) / 4))  # half the pair's bytes fit
    with pytest.raises(ValueError) as err:
        MODES["isolated"].fit_memory(cfg, {}, 2)
    message = str(err.value)
    assert f"predicted to peak at {predicted:,.0f} MB per rank (isolated on 2 ranks, store {store}" in message
    assert f"a store of {2 * CHUNKS} parts (dsgraph partition --parts {2 * CHUNKS})" in message
    monkeypatch.setenv(LIMIT_ENV, str(predicted + 1))
    assert MODES["isolated"].fit_memory(cfg, {}, 2) == (cfg, "")


def test_plan_prints_an_isolated_runs_terms(store, tmp_path, capsys):
    import json

    from dsgraph.cli import main

    config = tmp_path / "ds.json"
    section = {"mode": "isolated", "hidden": 16, "heads": 2, "isolated": {"halo_fraction": 0.1}}
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "dsgraph": section}))
    assert main(["plan", "--config", str(config), "--world-size", "2", "--partitions", store]) == 0
    out = capsys.readouterr().out
    assert "memory per rank of isolated on 2 ranks (fp32" in out and "read-ahead subgraph" in out
    assert "its largest pair, parts" in out
