"""Training with edge features through the DeepSpeed engine: 1, 2 and 4 gloo ranks take the same
steps (losses within 1e-5, fp32) with the edge features' score bias on, for every strategy, with
edge-conditioned values for every strategy that takes them (all of them) and in sampled mode, for
a partition store, and in sampled mode; isolated mode gives every local edge its dataset features
(added self loops marked) and evaluates alike on any rank count. (Parameter gradients on 2 and 4 ranks against 1:
tests/parallel/test_conformance.py.)"""

import os

import numpy as np
import pytest
import torch

from dsgraph.graph import load_npz, save_npz
from dsgraph.parallel import get_strategy, strategy_names
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.trainer import Trainer
from tests.distributed import run
from tests.graphs import random_graph
from tests.train.helpers import (
    assert_same_evaluation,
    assert_same_steps,
    dataset_with_stores,
    ds_config,
    dump,
    quiet_trainer,
    results_by_world,
    step_losses,
)

HEADS = 4
BIAS, VALUE = {"edge_features": "bias"}, {"edge_features": "bias_value"}
BASE = dict(hidden=32, heads=HEADS, layers=2, self_loops=True, seed=3, eval_every=100)
SAMPLED = dict(fanouts=[3, 3], batch_size=16, feature_dtype="float32")


def edge_dataset(tmp: str) -> str:
    """random_graph with 3 edge features per edge as a .npz, and a partition store per rank count."""
    return dataset_with_stores(tmp, "edges.npz", random_graph(edge_features=3))


def _trainer(tmp, stage=2, **cfg) -> Trainer:
    return quiet_trainer(dict(BASE, dataset=edge_dataset(tmp), **cfg), stage)


def _runs(world: int, tmp: str) -> dict[str, dict]:
    runs = {s: dict(strategy=s, model=BIAS) for s in strategy_names() if not get_strategy(s).infeasible(HEADS, world)}
    runs.update({f"{s}-value": dict(strategy=s, model=VALUE) for s in strategy_names() if get_strategy(s).edge_values})
    runs["store"] = dict(strategy="ag", model=BIAS, partitions=os.path.join(tmp, f"store{world}"))
    runs["sampled"] = dict(mode="sampled", model=BIAS, sampled=SAMPLED)
    runs["sampled-value"] = dict(mode="sampled", model=VALUE, sampled=SAMPLED)
    return runs


def _train(rank, world, tmp):
    losses = step_losses((key, _trainer(tmp, epochs=3, **settings)) for key, settings in _runs(world, tmp).items())
    if rank == 0:
        dump(tmp, f"losses_{world}.json", losses)


@pytest.mark.slow
def test_one_two_and_four_ranks_take_the_same_steps_with_edge_features(tmp_path):
    edge_dataset(str(tmp_path))
    by_world = results_by_world(_train, tmp_path, "losses")
    assert by_world[1]["ag"] != by_world[1]["ag-value"]  # the edge-conditioned value changes the model
    for world in (2, 4):
        assert set(by_world[world]) >= {
            "ag",
            "ag-value",
            "halo",
            "halo-value",
            "ag_ring",
            "ag_ring-value",
            "a2a",
            "a2a-value",
            "store",
            "sampled",
            "sampled-value",
        }
    assert_same_steps(by_world, same_as={"store": "ag"})  # a store (relabelled) gives the .npz run's steps


def _edge_features_of(graph) -> dict[tuple[int, int], np.ndarray]:
    dst = np.repeat(np.arange(graph.num_nodes), graph.in_degrees().numpy())
    return {(int(d), int(s)): a for d, s, a in zip(dst, graph.col.numpy(), graph.edge_attr.numpy())}


def _isolated(rank, world, tmp):
    trainer = _trainer(
        tmp,
        stage=0,
        mode="isolated",
        model=BIAS,
        epochs=2,
        isolated=dict(chunks=8, repart_every=1, batch_size=16, halo_fraction=0.2),
    )
    first = trainer.evaluate(0)
    want = _edge_features_of(load_npz(edge_dataset(tmp)))
    for epoch in range(2):
        for step in trainer.mode.steps(epoch, epoch + 1):
            local = trainer.mode.data.graph
            ids, edges = local.nodes.node_ids.numpy(), local.edges
            dst = np.repeat(np.arange(local.num_nodes), local.block.rowptr.diff().numpy())
            for d, s, attr, added in zip(
                ids[dst], ids[local.block.col.numpy()], edges.attr.numpy(), edges.added_loop.numpy()
            ):
                if added:
                    assert d == s and not attr.any()
                else:
                    assert np.array_equal(attr, want[(int(d), int(s))])
            assert np.isfinite(trainer.train_step(step)["loss"])
    trainer.mode.close()
    if rank == 0:
        dump(tmp, f"isolated_{world}.json", first)


@pytest.mark.slow
def test_isolated_mode_carries_the_edge_features_of_every_local_edge(tmp_path):
    edge_dataset(str(tmp_path))
    by_world = results_by_world(_isolated, tmp_path, "isolated")
    assert_same_evaluation(by_world)


def _refused(rank, world, tmp):
    plain = os.path.join(tmp, "plain.npz")
    save_npz(random_graph(), plain)
    for settings in (dict(dataset=plain), dict(dataset=plain, mode="sampled", sampled=SAMPLED)):
        with pytest.raises(
            ValueError, match=r"reads edge features \(model.edge_features\), but the (file|graph) has no"
        ):
            Trainer(
                DsgraphConfig.from_dict(dict(BASE, model=BIAS, **settings)),
                ds_config(stage=2),
                torch.device("cpu"),
                log=lambda line: None,
            )
    with pytest.raises(ValueError, match="task 'link' does not read edge features"):
        DsgraphConfig.from_dict(dict(BASE, dataset=plain, model=BIAS, task="link"))
    for strategy in strategy_names():  # every strategy takes edge-conditioned values
        DsgraphConfig.from_dict(dict(BASE, dataset=plain, model=VALUE, strategy=strategy))


@pytest.mark.slow
def test_a_run_that_reads_edge_features_needs_a_dataset_and_strategy_that_have_them(tmp_path):
    run(_refused, 1, tmp_path)


def test_a_strategy_without_edge_values_is_refused_and_so_is_auto_that_may_pick_it(tmp_path, monkeypatch):
    """The config's check reads the spec: a strategy that took no edge values would be refused for
    'bias_value', and ``auto`` with it among its candidates too."""
    plain = os.path.join(tmp_path, "plain.npz")
    save_npz(random_graph(), plain)
    monkeypatch.setattr(type(get_strategy("ag_ring")), "edge_values", False)
    for strategy in ("ag_ring", "auto"):
        with pytest.raises(ValueError, match=f"runs with strategy ag or a2a or halo, not '{strategy}'"):
            DsgraphConfig.from_dict(dict(BASE, dataset=plain, model=VALUE, strategy=strategy))
    DsgraphConfig.from_dict(dict(BASE, dataset=plain, model=VALUE, strategy="a2a"))
