"""Training with node encodings through the DeepSpeed engine: 1, 2 and 4 gloo ranks take the same
steps (losses within 1e-5, fp32) with RWSE, LapPE and degree encodings on, for every strategy, for a
partition store, and in sampled mode, also beside linear global attention (the GraphGPS shape);
isolated mode carries every local row's encodings (own and halo rows) and, with global attention on
too, evaluates alike on any rank count; a run asking for an encoding its dataset lacks is
refused before training with the ``dsgraph encode`` command."""

import os

import numpy as np
import pytest
import torch

from dsgraph.graph import load_npz, save_npz
from dsgraph.graph.encode.cli import main as encode
from dsgraph.graph.partition_cli import main as partition
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

pytestmark = pytest.mark.slow  # every test here starts processes

HEADS = 4
MODEL = {"encodings": ["rwse", "lappe", "degree"], "max_degree": 8}
ADD = {
    **MODEL,
    "encoding_input": "add",
    "input_projection": True,
    "block": "transformer",
    "head": "linear",
    "norm": "pre",
}
GPS = {**ADD, "global_attention": "linear"}
BASE = dict(hidden=32, heads=HEADS, layers=2, self_loops=False, seed=3, eval_every=100)


def encoded_dataset(tmp: str) -> str:
    """random_graph as a .npz with exact RWSE (K=4) and LapPE (k=3); and one partition store per
    rank count (random parts) made from it."""
    return dataset_with_stores(
        tmp,
        "encoded.npz",
        random_graph(),
        lambda path: assert_ok(encode([path, "--rwse", "4", "--lappe", "3", "--quiet"])),
    )


def assert_ok(code: int) -> None:
    assert code == 0


def _trainer(tmp, stage=2, **cfg) -> Trainer:
    return quiet_trainer(dict(BASE, dataset=encoded_dataset(tmp), **cfg), stage)


def _runs(world: int, tmp: str) -> dict[str, dict]:
    runs = {s: dict(strategy=s, model=MODEL) for s in strategy_names() if not get_strategy(s).infeasible(HEADS, world)}
    runs["ag-add"] = dict(strategy="ag", model=ADD)
    runs["store"] = dict(strategy="ag", model=MODEL, partitions=os.path.join(tmp, f"store{world}"))
    runs["sampled"] = dict(
        mode="sampled", model=MODEL, sampled=dict(fanouts=[3, 3], batch_size=16, feature_dtype="float32")
    )
    runs["halo-gps"] = dict(strategy="halo", model=GPS)  # every strategy's gradients: tests/models/test_encodings.py
    runs["sampled-gps"] = dict(runs["sampled"], model=GPS)
    return runs


def _train(rank, world, tmp):
    losses = step_losses((key, _trainer(tmp, epochs=3, **settings)) for key, settings in _runs(world, tmp).items())
    if rank == 0:
        dump(tmp, f"losses_{world}.json", losses)


def _by_world(fn, tmp_path, name: str) -> dict[int, dict]:
    """What rank 0 of ``fn`` saved as ``name``_W.json, run on W = 1, 2 and 4 ranks."""
    encoded_dataset(str(tmp_path))
    return results_by_world(fn, tmp_path, name)


def test_one_two_and_four_ranks_take_the_same_steps_with_encodings(tmp_path):
    by_world = _by_world(_train, tmp_path, "losses")
    reference = by_world[1]
    assert len(reference["sampled"]) == 3 * 4  # 53 training nodes in batches of 16
    for world in (2, 4):
        assert set(by_world[world]) >= {
            "ag",
            "ag-add",
            "store",
            "sampled",
            "halo",
            "ag_ring",
            "halo-gps",
            "sampled-gps",
        }
    assert_same_steps(by_world, same_as={"store": "ag"})  # a store (relabelled) gives the .npz run's steps


def _isolated(rank, world, tmp):
    trainer = _trainer(
        tmp,
        stage=0,
        mode="isolated",
        model={**MODEL, "global_attention": "linear"},
        epochs=2,
        self_loops=True,
        isolated=dict(chunks=8, repart_every=1, batch_size=16, halo_fraction=0.2),
    )
    first = trainer.evaluate(0)
    graph = load_npz(encoded_dataset(tmp))
    for epoch in range(2):
        for step in trainer.mode.steps(epoch, epoch + 1):
            ids = trainer.mode.data.graph.nodes.node_ids  # own rows, then halo rows: dataset ids
            assert trainer.mode.data.halo_nodes > 0 or world == 1
            for name in ("rwse", "lappe", "lappe_eigvals", "degree"):
                assert torch.equal(step.enc[name], graph.enc[name][ids]), name
            assert np.isfinite(trainer.train_step(step)["loss"])
    trainer.mode.close()
    if rank == 0:
        dump(tmp, f"isolated_{world}.json", first)


def test_isolated_mode_carries_encodings_of_own_and_halo_rows(tmp_path):
    by_world = _by_world(_isolated, tmp_path, "isolated")
    assert_same_evaluation(by_world)


def _missing(rank, world, tmp):
    plain = os.path.join(tmp, "plain.npz")
    save_npz(random_graph(), plain)
    for settings in (
        dict(dataset=plain),
        dict(dataset=plain, mode="sampled", sampled=dict(fanouts=[3, 3])),
        dict(dataset=plain, partitions=os.path.join(tmp, "plainstore")),
    ):
        if "partitions" in settings and rank == 0:
            assert (
                partition(
                    [
                        "--dataset",
                        plain,
                        "--parts",
                        "1",
                        "--method",
                        "random",
                        "--out",
                        settings["partitions"],
                        "--quiet",
                    ]
                )
                == 0
            )
        cfg = DsgraphConfig.from_dict(dict(BASE, model={"encodings": ["degree", "lappe"]}, **settings))
        with pytest.raises(ValueError, match=r"no 'lappe', 'lappe_eigvals' array.*`dsgraph encode \S+ --lappe 8`"):
            Trainer(cfg, ds_config(stage=2), torch.device("cpu"), log=lambda line: None)


def test_a_run_without_its_encodings_is_refused_with_the_command(tmp_path):
    run(_missing, 1, tmp_path)
