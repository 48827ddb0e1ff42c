"""Seed mini-batches: which training nodes go in which batch on which rank, and one batch built
end to end (sample the subgraph, gather its features and the seeds' labels).

Each epoch shuffles the training nodes with a generator seeded by (seed, epoch) and cuts them into
global batches of ``batch_size``; rank r takes an even contiguous share of every global batch (ranks
are data-parallel over seeds), and every rank runs the same number of steps per epoch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from dsgraph.modes.sampled.feature_store import FeatureStore
from dsgraph.modes.sampled.sampler import NeighborSampler, SampledSubgraph, batch_key


def epoch_batches(
    train_ids: np.ndarray, batch_size: int, seed: int, epoch: int, world_size: int = 1
) -> list[np.ndarray]:
    """The global seed batches of one epoch, in order. A last batch too small to give every rank a
    seed joins the one before it."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if len(train_ids) < world_size:
        raise ValueError(f"{len(train_ids)} training nodes cannot feed {world_size} data-parallel ranks")
    perm = np.asarray(train_ids, dtype=np.int64)[np.random.default_rng([seed, epoch]).permutation(len(train_ids))]
    batches = [perm[i : i + batch_size] for i in range(0, perm.size, batch_size)]
    if len(batches) > 1 and batches[-1].size < world_size:
        batches[-2:] = [np.concatenate(batches[-2:])]
    if batches[0].size < world_size:
        raise ValueError(f"batch_size {batch_size} is smaller than the {world_size} data-parallel ranks")
    return batches


def rank_share(batch: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """Rank ``rank``'s contiguous share of a global batch (the first ``len % world`` ranks get one more)."""
    base, extra = divmod(batch.size, world_size)
    start = rank * base + min(rank, extra)
    return batch[start : start + base + (rank < extra)]


@dataclass
class MiniBatch:
    """One rank's training input for one step."""

    epoch: int
    index: int  # batch index within the epoch
    global_size: int  # seeds in the global batch (all ranks)
    global_count: int  # what the loss divides by: global_size, or present (seed, label) pairs of a multi-label task
    graph: SampledSubgraph  # compact subgraph, seeds first
    x: torch.Tensor  # [n, F] features of graph.node_ids, storage dtype, on the store's device
    y: torch.Tensor  # int64 [num_seeds] labels of the seeds, or float [num_seeds, T] (NaN: missing); host memory
    cache_hits: int  # rows of x served by the feature cache
    sample_time_s: float
    gather_time_s: float
    enc: dict[str, torch.Tensor] = field(default_factory=dict)  # encoding arrays of graph.node_ids; host memory


class BatchBuilder:
    """Builds MiniBatches: sampler + feature store + labels (+ the encoding arrays ``enc`` [N, w] of
    every node, gathered like the labels), keyed by (seed, epoch, batch)."""

    def __init__(
        self,
        sampler: NeighborSampler,
        store: FeatureStore,
        labels: torch.Tensor,
        seed: int,
        enc: dict[str, torch.Tensor] | None = None,
    ):
        self.sampler, self.store, self.labels, self.seed = sampler, store, labels, seed
        self.enc = enc or {}

    def build(self, epoch: int, index: int, global_batch: np.ndarray, rank: int = 0, world_size: int = 1) -> MiniBatch:
        start = time.perf_counter()
        seeds = rank_share(global_batch, rank, world_size)
        graph = self.sampler.sample(seeds, batch_key(self.seed, epoch, index))
        sampled = time.perf_counter()
        x, hits = self.store.gather(graph.node_ids)
        y = self.labels[graph.node_ids[: graph.num_seeds]]  # host memory: RankGraph.to moves it with the batch
        done = time.perf_counter()
        if self.labels.ndim == 2:  # every rank counts the whole global batch's pairs: the same divisor everywhere
            count = int((~torch.isnan(self.labels[torch.from_numpy(np.asarray(global_batch))])).sum())
        else:
            count = int(global_batch.size)
        return MiniBatch(
            epoch=epoch,
            index=index,
            global_size=int(global_batch.size),
            global_count=count,
            graph=graph,
            x=x,
            y=y,
            cache_hits=hits,
            sample_time_s=sampled - start,
            gather_time_s=done - sampled,
            enc={name: table[graph.node_ids] for name, table in self.enc.items()},
        )
