"""Training and evaluation batches of a sampled run from a partition store (``--partitions``).

Training takes the whole-graph run's batches: the global batch is cut from every rank's training
ids (original ids, keyed by seed and epoch as ``epoch_batches`` does), each rank takes its share,
and ``RemoteSampler`` samples and fetches it from the parts that own its nodes, so subgraph,
features and labels equal the whole-graph builder's. Evaluation is chunked: each rank evaluates its
own rows that are in a split, a chunk of them per forward, each sampled with the training fanouts
under one fixed key (a node's draws do not depend on the chunk or on the rank count); the counts
are summed over the ranks.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from dsgraph.modes.sampled.minibatch import MiniBatch, rank_share
from dsgraph.modes.sampled.remote import RemoteSampler
from dsgraph.modes.sampled.sampler import SampledSubgraph, batch_key

EVAL_EPOCH = -1
"""The epoch that keys evaluation's draws (``batch_key(seed, EVAL_EPOCH, 0)``): no training epoch."""


class StoreBatchBuilder:
    """MiniBatches from a store: ``train_ids`` (original ids, ascending) and ``train_new`` (their
    relabelled ids) are every rank's training rows; features come in ``dtype``, on ``device``."""

    def __init__(self, sampler: RemoteSampler, train_ids: np.ndarray, train_new: np.ndarray, seed: int, dtype, device):
        self.sampler, self.train_ids, self.train_new, self.seed = sampler, train_ids, train_new, seed
        self.dtype, self.device = dtype, torch.device(device)

    def relabelled(self, ids: np.ndarray) -> np.ndarray:
        """Relabelled ids of training nodes given by original id."""
        return self.train_new[np.searchsorted(self.train_ids, ids)]

    def build(self, epoch: int, index: int, global_batch: np.ndarray, rank: int = 0, world_size: int = 1) -> MiniBatch:
        start = time.perf_counter()
        seeds = rank_share(global_batch, rank, world_size)
        graph, new_ids = self.sampler.sample(seeds, self.relabelled(seeds), batch_key(self.seed, epoch, index))
        sampled = time.perf_counter()
        rows = self.sampler.fetch(new_ids)
        x = rows.x.to(self.dtype).to(self.device)
        return MiniBatch(
            epoch=epoch,
            index=index,
            global_size=int(global_batch.size),
            global_count=int(global_batch.size),
            graph=graph,
            x=x,
            y=rows.y[: graph.num_seeds],
            cache_hits=0,
            sample_time_s=sampled - start,
            gather_time_s=time.perf_counter() - sampled,
        )

    def eval_chunk(self, chunk: np.ndarray, fallback: int) -> tuple[SampledSubgraph, torch.Tensor, torch.Tensor, tuple]:
        """One evaluation chunk (relabelled ids, possibly empty: then the row ``fallback`` is the seed,
        in no split): (subgraph, features [n, F] in ``dtype`` on the device, labels [n] (-1 off the
        seeds), (train, val, test) masks [n], True only on seeds in that split)."""
        seeds_new = chunk if chunk.size else np.array([fallback], dtype=np.int64)
        seeds = self.sampler.view.original(seeds_new)
        graph, new_ids = self.sampler.sample(seeds, seeds_new, batch_key(self.seed, EVAL_EPOCH, 0))
        rows = self.sampler.fetch(new_ids)
        seed_rows = torch.arange(graph.num_nodes) < (graph.num_seeds if chunk.size else 0)
        y = torch.where(seed_rows, rows.y, torch.full_like(rows.y, -1))
        masks = tuple(rows.masks[:, i] & seed_rows for i in range(3))
        return graph, rows.x.to(self.dtype).to(self.device), y, masks
