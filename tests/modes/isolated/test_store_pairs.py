"""Isolated training from a partition store, one chunk pair at a time (``store_pairs.py``): a pair's
subgraph is the in-memory loader's on the same chunks (C = 2 W, one pair per rank), the halo's
features come from the store, every chunk is trained once per super-epoch over the ranks, the
config's checks, and on 2 ranks the losses equal the in-memory mode's and evaluation covers every
node once."""

import os

import numpy as np
import pytest
import torch

from dsgraph.graph import load_npz
from dsgraph.modes.isolated.chunk_store import ChunkLoader, LoadSettings, write_chunk_store
from dsgraph.modes.isolated.chunks import RotationSchedule, assign_chunks
from dsgraph.modes.isolated.store_pairs import StorePairs, store_chunk_count
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.trainer import Trainer
from tests.distributed import run
from tests.graphs import random_graph
from tests.train.helpers import ds_config, dump, load, write_random_graph

SEED = 3


def _stores(tmp, graph, chunks: int) -> tuple[str, str]:
    """(the in-memory mode's chunk store, with self loops; the same chunks as a partition store, without)."""
    chunk_of = assign_chunks(graph, chunks, "random", SEED)
    looped, plain = os.path.join(tmp, "looped"), os.path.join(tmp, "plain")
    write_chunk_store(graph.with_self_loops(), chunk_of, chunks, looped, method="random", seed=SEED, dataset="t")
    write_chunk_store(graph, chunk_of, chunks, plain, method="random", seed=SEED, dataset="t")
    return looped, plain


def _edges(graph) -> torch.Tensor:
    """The block's edges as sorted (destination, source) keys (the order within a row may differ)."""
    rowptr, col = graph.block.rowptr, graph.block.col.long()
    dst = torch.repeat_interleave(torch.arange(rowptr.numel() - 1), rowptr.diff())
    return torch.sort(dst * graph.num_nodes + col).values


def _settings(correction: str, halo_fraction: float) -> LoadSettings:
    return LoadSettings(
        correction=correction,
        layers=2,
        halo_fraction=halo_fraction,
        halo_self_loops=True,
        repart_every=1,
        epochs=4,
        seed=SEED,
    )


@pytest.mark.parametrize("correction, halo_fraction", [("none", 0.1), ("resample", 0.0), ("coverage", 0.0)])
def test_one_pair_per_rank_is_the_in_memory_subgraph(tmp_path, correction, halo_fraction):
    graph = random_graph(num_nodes=157, num_edges=900, seed=1)
    looped, plain = _stores(str(tmp_path), graph, 4)
    schedule, settings, cpu = RotationSchedule(4, 2), _settings(correction, halo_fraction), torch.device("cpu")
    for rank in range(2):
        memory = ChunkLoader(looped, schedule, rank, settings, device=cpu, dtype=torch.float32)
        pairs = StorePairs(plain, schedule, rank, settings, device=cpu, dtype=torch.float32)
        for s in range(3):
            a, b = memory.load(s), pairs.load(s, 0)
            assert pairs.pairs(s) == [tuple(a.chunks)] and b.chunks == a.chunks
            ga, gb = a.graph, b.graph
            assert torch.equal(ga.block.rowptr, gb.block.rowptr) and torch.equal(_edges(ga), _edges(gb))
            assert torch.equal(ga.nodes.node_ids, gb.nodes.node_ids)
            own = ga.num_nodes - a.halo_nodes
            assert b.halo_nodes == a.halo_nodes and a.halo_nodes == (int(0.1 * own) if halo_fraction else 0)
            assert torch.equal(ga.nodes.x[:own], gb.nodes.x[:own])
            # the halo rows' features are read from the store: the dataset's features of those nodes
            assert torch.equal(gb.nodes.x[own:], graph.x[gb.nodes.node_ids[own:]])
            for name in ("y", "train_mask", "val_mask", "test_mask"):
                assert torch.equal(getattr(ga.nodes, name), getattr(gb.nodes, name)), name
            assert torch.allclose(a.row_weights, b.row_weights, rtol=1e-6), correction
            assert (a.coverage, a.halo_hits, a.halo_misses) == (b.coverage, b.halo_hits, b.halo_misses)


def test_pairs_cover_every_chunk_once_per_super_epoch_and_load_one_pair(tmp_path):
    graph = random_graph(num_nodes=203, num_edges=1200, seed=2)
    _, plain = _stores(str(tmp_path), graph, 8)
    schedule, settings = RotationSchedule(8, 2), _settings("resample", 0.05)
    loaders = [
        StorePairs(plain, schedule, r, settings, device=torch.device("cpu"), dtype=torch.float32) for r in range(2)
    ]
    for s in range(7):
        pairs = [pair for loader in loaders for pair in loader.pairs(s)]
        assert len(pairs) == 4 and sorted(c for pair in pairs for c in pair) == list(range(8))
        for rank, loader in enumerate(loaders):
            assert sorted(c for pair in loader.pairs(s) for c in pair) == schedule.chunks(rank, s)
            assert sum(loader.pair_train_counts(s)) == loader.rank_train_counts(s)[rank]
            for i, pair in enumerate(loader.pairs(s)):
                data = loader.load(s, i)
                own = data.graph.num_nodes - data.halo_nodes
                ranges = [loader.meta["node_ranges"][c] for c in pair]
                assert own == sum(end - start for start, end in ranges)
    # over the cycle every two chunks meet once
    met = {frozenset(p) for s in range(7) for loader in loaders for p in loader.pairs(s)}
    assert len(met) == 28


def test_store_chunk_count_and_config_errors(tmp_path):
    graph = random_graph(num_nodes=60, num_edges=300)
    _, plain = _stores(str(tmp_path), graph, 4)
    assert store_chunk_count(plain, 0, 2) == 4 and store_chunk_count(plain, 4, 2) == 4
    with pytest.raises(ValueError, match=r"'chunks' is 6, but the partition store .* has 4 parts"):
        store_chunk_count(plain, 6, 2)
    odd = os.path.join(str(tmp_path), "odd")
    write_chunk_store(graph, assign_chunks(graph, 3, "random", SEED), 3, odd, method="random", seed=SEED, dataset="t")
    with pytest.raises(ValueError, match=r"has 3 parts; isolated mode trains its chunks in pairs"):
        store_chunk_count(odd, 0, 1)
    base = {"mode": "isolated", "partitions": plain, "eval_every": 5, "checkpoint_every": 0}
    with pytest.raises(ValueError, match=r"trains one chunk pair at a time, so the ranks' step counts differ"):
        DsgraphConfig.from_dict({**base, "isolated": {"sync": "step"}})
    with pytest.raises(ValueError, match=r"drop isolated 'store'"):
        DsgraphConfig.from_dict({**base, "isolated": {"store": str(tmp_path)}})
    with pytest.raises(ValueError, match=r"reads node features only"):
        DsgraphConfig.from_dict({**base, "model": {"encodings": ["degree"]}})


TRAIN = dict(
    hidden=16,
    heads=2,
    layers=2,
    self_loops=True,
    seed=SEED,
    mode="isolated",
    epochs=4,
    eval_every=2,
    isolated={
        "chunks": 4,
        "repart_every": 1,
        "batch_size": 0,
        "halo_fraction": 0.1,
        "correction": "none",
        "comm_dtype": "float32",
        "prefetch": True,
    },
)


def _losses(rank, world, tmp):
    """Losses of the in-memory mode and of the store's (same chunks), and the store's evaluation."""
    path = write_random_graph(tmp)
    if rank == 0:
        _stores(tmp, load_npz(path), 4)
    torch.distributed.barrier()
    out = {}
    for name, extra in (("memory", {}), ("store", {"partitions": os.path.join(tmp, "plain")})):
        cfg = DsgraphConfig.from_dict(dict(TRAIN, dataset=path, **extra))
        trainer = Trainer(cfg, ds_config(stage=0), torch.device("cpu"), log=lambda line: None)
        out[name] = [trainer.train_step(step)["loss"] for step in trainer.mode.steps(0)]
        if name == "store":
            batches = list(trainer.mode.eval_batches())
            out["eval_rows"] = [int(sum(int(m.sum()) for m in b.masks)) for b in batches]
            out["eval"] = trainer.evaluate(TRAIN["epochs"] - 1)["test_acc"]
        trainer.close()
    dump(tmp, f"rank{rank}.json", out)


@pytest.mark.slow
def test_two_ranks_from_a_store_take_the_in_memory_steps(tmp_path):
    run(_losses, 2, tmp_path)
    ranks = [load(str(tmp_path), f"rank{r}.json") for r in range(2)]
    graph = load_npz(write_random_graph(str(tmp_path)))
    for out in ranks:
        assert len(out["store"]) == TRAIN["epochs"] and np.allclose(out["store"], out["memory"], rtol=1e-5, atol=1e-6)
    # evaluation: every node in one split counted once over the ranks' pairs
    assert sum(sum(out["eval_rows"]) for out in ranks) == graph.num_nodes
    assert ranks[0]["eval"] == ranks[1]["eval"] and 0.0 <= ranks[0]["eval"] <= 1.0
