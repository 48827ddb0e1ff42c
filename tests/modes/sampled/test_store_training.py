"""Sampled mode from a partition store on gloo processes: the remote feature fetch (owners draw and
answer over all_to_all) gives every rank the whole-graph sampler's batches; 2 ranks train with the
whole-graph run's losses, and evaluation counts every node in a split once over the ranks."""

import os

import numpy as np
import pytest
import torch

from dsgraph.comm.control import TorchControlPlane
from dsgraph.graph import load_npz
from dsgraph.modes.sampled import epoch_batches
from dsgraph.modes.sampled.exchange import Exchange
from dsgraph.modes.sampled.remote import RemoteSampler
from dsgraph.modes.sampled.store_batches import StoreBatchBuilder
from dsgraph.modes.sampled.store_source import StoreView
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.trainer import Trainer
from tests.distributed import run
from tests.graphs import random_graph
from tests.modes.sampled.test_store_sampling import (
    BATCH,
    FANOUTS,
    SEED,
    assert_same_batch,
    whole_builder,
    write_uneven_store,
)
from tests.train.helpers import ds_config, dump, load, write_random_graph


def _batches(rank, world, tmp):
    graph = random_graph(num_nodes=157, num_edges=900, seed=1)
    store = os.path.join(tmp, "store")
    if rank == 0:
        write_uneven_store(graph, world, store)
    torch.distributed.barrier()
    control = TorchControlPlane()
    view = StoreView(store, rank, world, control)
    train_ids, train_new = view.train_ids(control)
    exchange = Exchange(rank, world)
    builder = StoreBatchBuilder(
        RemoteSampler(view, exchange, FANOUTS), train_ids, train_new, SEED, torch.float32, "cpu"
    )
    whole = whole_builder(graph)
    steps = 0
    for epoch in range(2):
        for index, batch in enumerate(epoch_batches(train_ids, BATCH, SEED, epoch, world)):
            assert_same_batch(
                builder.build(epoch, index, batch, rank, world), whole.build(epoch, index, batch, rank, world)
            )
            steps += 1
    dump(tmp, f"batches{rank}.json", {"steps": steps, "calls": exchange.calls, "bytes": exchange.bytes_sent})


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_remote_fetch_gives_the_whole_graph_samplers_batches(tmp_path, world):
    run(_batches, world, tmp_path)
    outs = [load(str(tmp_path), f"batches{r}.json") for r in range(world)]
    assert outs[0]["steps"] > 4 and len({(o["steps"], o["calls"]) for o in outs}) == 1
    assert all(o["bytes"] > 0 for o in outs)


TRAIN = dict(
    hidden=16,
    heads=2,
    layers=2,
    seed=SEED,
    mode="sampled",
    epochs=2,
    eval_every=2,
    sampled=dict(fanouts=[3, 2], batch_size=16, prefetch_depth=2, cache_fraction=0.2),
)


def _losses(rank, world, tmp):
    """Losses of the whole-graph run and of the store's (same batches), and the store's evaluation."""
    path = write_random_graph(tmp)
    store = os.path.join(tmp, "store")
    if rank == 0:
        write_uneven_store(load_npz(path), world, store)
    torch.distributed.barrier()
    out = {}
    for name, extra in (("memory", {}), ("store", {"partitions": store})):
        cfg = DsgraphConfig.from_dict(dict(TRAIN, dataset=path, **extra))
        trainer = Trainer(cfg, ds_config(stage=2), torch.device("cpu"), log=lambda line: None)
        out[name] = [trainer.train_step(step)["loss"] for step in trainer.mode.steps(0)]
        if name == "store":
            batches = list(trainer.mode.eval_batches())
            out["eval_rows"] = int(sum(int((b.masks[0] | b.masks[1] | b.masks[2]).sum()) for b in batches))
            row = trainer.evaluate(TRAIN["epochs"] - 1)
            out["eval"] = {key: row[key] for key in ("test_acc", "loss")}
        trainer.close()
    dump(tmp, f"rank{rank}.json", out)


@pytest.mark.slow
def test_two_ranks_from_a_store_take_the_whole_graph_runs_steps(tmp_path):
    run(_losses, 2, tmp_path)
    ranks = [load(str(tmp_path), f"rank{r}.json") for r in range(2)]
    graph = load_npz(write_random_graph(str(tmp_path)))
    for out in ranks:
        assert len(out["store"]) == len(out["memory"]) >= 8
        assert np.allclose(out["store"], out["memory"], rtol=1e-5, atol=1e-6), (out["store"], out["memory"])
    in_split = graph.train_mask | graph.val_mask | graph.test_mask
    assert sum(out["eval_rows"] for out in ranks) == int(in_split.sum())
    evals = [out["eval"] for out in ranks]
    assert evals[0]["test_acc"] == evals[1]["test_acc"] and 0.0 <= evals[0]["test_acc"] <= 1.0
