"""Sampled mode from a partition store (``remote.py``, ``store_batches.py``): every rank's batch —
subgraph in original ids, features, labels — equals the whole-graph builder's for the same seed,
epoch and batch, with the owners drawing and answering over collectives. Here the ranks are threads
sharing a mailbox (fast, 2 and 4 ranks); ``test_store_training.py`` runs gloo processes."""

import threading

import numpy as np
import pytest
import torch

from dsgraph.graph.partition import relabel
from dsgraph.graph.store import write_store
from dsgraph.modes.sampled import BatchBuilder, FeatureStore, NeighborSampler, batch_key, epoch_batches
from dsgraph.modes.sampled.remote import RemoteSampler
from dsgraph.modes.sampled.store_batches import EVAL_EPOCH, StoreBatchBuilder
from dsgraph.modes.sampled.store_source import StoreView
from tests.graphs import random_graph

SEED, FANOUTS, BATCH = 3, [3, 5], 16


class Mailbox:
    """What W thread-ranks hand each other: ``swap`` (Exchange's) and ``allgather`` (the control plane's)."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.box = [[None] * world_size for _ in range(world_size)]
        self.barrier = threading.Barrier(world_size, timeout=60)

    def post(self, rank: int, items: list) -> list:
        for dst, item in enumerate(items):
            self.box[rank][dst] = item
        self.barrier.wait()
        got = [self.box[src][rank] for src in range(self.world_size)]
        self.barrier.wait()
        return got


class ThreadRank:
    """One thread-rank's Exchange and control plane over a Mailbox."""

    def __init__(self, mailbox: Mailbox, rank: int):
        self.mailbox, self.rank, self.world_size = mailbox, rank, mailbox.world_size
        self.calls = 0

    def swap(self, rows, counts):
        self.calls += 1
        got = self.mailbox.post(self.rank, np.split(rows, np.cumsum(counts)[:-1]))
        return np.concatenate(got), np.array([g.shape[0] for g in got], dtype=np.int64)

    def allgather(self, obj):
        return self.mailbox.post(self.rank, [obj] * self.world_size)


def on_threads(world_size: int, fn) -> list:
    """``fn(rank_io)`` on ``world_size`` threads; their results in rank order (a failure re-raised)."""
    mailbox, results, errors = Mailbox(world_size), [None] * world_size, []

    def body(rank):
        try:
            results[rank] = fn(ThreadRank(mailbox, rank))
        except BaseException as err:  # noqa: BLE001 (re-raised below)
            errors.append(err)
            mailbox.barrier.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def write_uneven_store(graph, world_size: int, out: str) -> np.ndarray:
    """A store of ``graph`` whose parts have uneven sizes (random parts, the last one larger)."""
    parts = np.random.default_rng(11).integers(0, world_size, graph.num_nodes)
    parts[: graph.num_nodes // 5] = world_size - 1
    new_graph, perm, ranges = relabel(graph, parts, world_size)
    write_store(new_graph, perm, ranges, out, "random", dataset="random", seed=SEED)
    return ranges


def whole_builder(graph) -> BatchBuilder:
    sampler = NeighborSampler(graph.rowptr, graph.col, FANOUTS, self_loops=True)
    return BatchBuilder(sampler, FeatureStore(graph.x), graph.y, SEED)


def store_builder(io, store: str) -> StoreBatchBuilder:
    view = StoreView(store, io.rank, io.world_size, io)
    train_ids, train_new = view.train_ids(io)
    sampler = RemoteSampler(view, io, FANOUTS, self_loops=True)
    return StoreBatchBuilder(sampler, train_ids, train_new, SEED, torch.float32, "cpu")


def assert_same_batch(a, b) -> None:
    """Two MiniBatches: same subgraph (original ids), features, labels and loss divisor."""
    for name in ("node_ids", "rowptr", "col"):
        assert torch.equal(getattr(a.graph, name), getattr(b.graph, name)), name
    assert (a.graph.num_seeds, a.graph.nodes_before_dedup) == (b.graph.num_seeds, b.graph.nodes_before_dedup)
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    assert (a.global_size, a.global_count) == (b.global_size, b.global_count)


@pytest.mark.parametrize("world_size", [2, 4])
def test_store_batches_equal_the_whole_graph_builders(tmp_path, world_size):
    graph = random_graph(num_nodes=157, num_edges=900, seed=1)
    ranges = write_uneven_store(graph, world_size, str(tmp_path / "store"))
    assert len({int(e - s) for s, e in ranges}) > 1  # uneven parts
    whole = whole_builder(graph)
    train_ids = graph.train_mask.nonzero().squeeze(1).numpy()

    def run(io):
        builder = store_builder(io, str(tmp_path / "store"))
        assert np.array_equal(builder.train_ids, train_ids)
        out = []
        for epoch in range(2):
            for index, batch in enumerate(epoch_batches(train_ids, BATCH, SEED, epoch, world_size)):
                got = builder.build(epoch, index, batch, io.rank, world_size)
                out.append((got, whole.build(epoch, index, batch, io.rank, world_size), io.calls))
        return out

    results = on_threads(world_size, run)
    for rank_results in results:
        for got, want, _ in rank_results:
            assert_same_batch(got, want)
    # every rank made the same exchanges; seeds with no in-edges and the hub's prefix draws occurred
    assert len({tuple(c for *_, c in r) for r in results}) == 1
    seeds = np.concatenate([want.graph.node_ids[: want.graph.num_seeds].numpy() for r in results for _, want, _ in r])
    degrees = np.diff(graph.rowptr.numpy())
    assert (degrees[seeds] == 0).any() and 5 in seeds and degrees[5] > max(FANOUTS)


def test_eval_chunks_cover_each_rank_rows_and_sample_like_the_whole_graph(tmp_path):
    graph = random_graph(num_nodes=157, num_edges=900, seed=1)
    write_uneven_store(graph, 2, str(tmp_path / "store"))
    sampler = NeighborSampler(graph.rowptr, graph.col, FANOUTS, self_loops=True)
    in_split = graph.train_mask | graph.val_mask | graph.test_mask

    def run(io):
        builder = store_builder(io, str(tmp_path / "store"))
        chunks = builder.sampler.view.eval_chunks(20, io)
        out = []
        for chunk in chunks:
            sub, x, y, masks = builder.eval_chunk(chunk, builder.sampler.view.part.start)
            out.append((chunk.size, sub, x, y, masks))
        return out

    results = on_threads(2, run)
    assert len(results[0]) == len(results[1]) > 1  # the same number of forwards on every rank
    seen = []
    for rank_results in results:
        for size, sub, x, y, masks in rank_results:
            seeds = sub.node_ids[:size]
            seen.append(seeds)
            want = sampler.sample(sub.node_ids[: sub.num_seeds].numpy(), batch_key(SEED, EVAL_EPOCH, 0))
            assert torch.equal(sub.node_ids, want.node_ids) and torch.equal(sub.col, want.col)
            assert torch.equal(x, graph.x[sub.node_ids])
            assert torch.equal(y[:size], graph.y[seeds]) and (y[size:] == -1).all()
            for mask, full in zip(masks, (graph.train_mask, graph.val_mask, graph.test_mask)):
                assert torch.equal(mask[:size], full[seeds]) and not mask[size:].any()
    seen = torch.sort(torch.cat(seen)).values
    assert torch.equal(seen, in_split.nonzero().squeeze(1))  # every node in a split once over the ranks
