"""Training with GP-Halo (graph partitioned in memory) and from a partition store (ag and halo,
each rank loading only its part) takes the same steps as the single-process run."""

import pytest
import torch

from dsgraph.graph.partition_cli import main as partition_main
from dsgraph.train.config import DsgraphConfig
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, make_trainer, write_random_graph

VARIANTS = ("halo", "halo-store", "ag-store")


def _settings(tmp: str, variant: str, world: int) -> dict:
    strategy, _, store = variant.partition("-")
    return {"strategy": strategy, **({"partitions": f"{tmp}/store{world}"} if store else {})}


def _steps(rank, world, tmp, variants):
    results = {}
    for variant in variants:
        trainer = make_trainer(tmp, ds_config(stage=2), **_settings(tmp, variant, world), self_loops=True)
        losses = [trainer.train_epoch(epoch)["loss"] for epoch in range(3)]
        evaluation = trainer.evaluate(2)
        start, end = trainer.pg.rows
        file_order = torch.arange(start, end)
        results[variant] = {
            "losses": losses,
            "val_acc": evaluation["val_acc"],
            "test_acc": evaluation["test_acc"],
            "relabelled": not torch.equal(trainer.mode.ranks.graph.nodes.node_ids.cpu(), file_order),
        }
    if rank == 0:
        dump(tmp, f"halo_{world}.json", results)


@pytest.mark.slow
@pytest.mark.smoke
def test_halo_and_store_training_match_one_process(tmp_path):
    graph_path = write_random_graph(str(tmp_path))
    assert (
        partition_main(
            ["--dataset", graph_path, "--parts", "2", "--method", "metis", "--out", f"{tmp_path}/store2", "--quiet"]
        )
        == 0
    )
    run(_steps, 1, tmp_path, ("halo",))
    run(_steps, 2, tmp_path, VARIANTS)
    reference = load(tmp_path, "halo_1.json")["halo"]
    results = load(tmp_path, "halo_2.json")
    assert reference["losses"][-1] < reference["losses"][0]
    for variant in VARIANTS:
        got = results[variant]
        assert got["relabelled"], f"{variant}: rows were not split by the METIS partition"
        for a, b in zip(got["losses"], reference["losses"]):
            assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (variant, got["losses"], reference["losses"])
        assert abs(got["val_acc"] - reference["val_acc"]) < 1e-9 and abs(got["test_acc"] - reference["test_acc"]) < 1e-9


def test_config_refuses_a2a_with_partitions_and_bad_halo_settings():
    with pytest.raises(ValueError, match="strategy 'a2a' needs the whole graph on every rank"):
        DsgraphConfig.from_dict({"strategy": "a2a", "partitions": "parts/cora-2"})
    with pytest.raises(ValueError, match="'partition_method' must be one of metis, random"):
        DsgraphConfig.from_dict({"strategy": "halo", "partition_method": "spectral"})
    with pytest.raises(ValueError, match="'timeout_s' must be > 0"):
        DsgraphConfig.from_dict({"timeout_s": 0})
    assert DsgraphConfig.from_dict({"strategy": "halo", "partitions": "parts/cora-2"}).timeout_s == 300.0
