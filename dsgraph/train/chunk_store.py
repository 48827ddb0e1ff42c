"""The chunk store of isolated training and the loading of one super-epoch's local subgraph.

The graph, relabelled so every chunk is one id range, is written once as a partition store with C
parts (``write_chunk_store``). For super-epoch s a rank memory-maps its primary chunks (once) and
that super-epoch's neighbour chunk (checked against META.json, sha256 included), builds the induced
subgraph with local ids, and weights its training nodes (``ChunkLoader.load``). ``ChunkPrefetcher``
runs the next load in a background thread while the current super-epoch trains, and measures how
long the switch stalls training.
"""

from __future__ import annotations

import dataclasses
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from dsgraph.graph import Graph
from dsgraph.graph.partition import relabel
from dsgraph.graph.rank_graph import RankGraph, whole_graph
from dsgraph.graph.store import load_part, load_permutation, read_meta, write_store
from dsgraph.parallel.isolated import RotationSchedule, correction_weights, cycle_coverage, induced_subgraph


def write_chunk_store(
    graph: Graph, chunk_of: np.ndarray, num_chunks: int, out_dir: str, *, method: str, seed: int, dataset: str
) -> dict:
    """Writes ``graph`` (self loops already added if the model wants them) relabelled by chunk as a
    store with one part per chunk; replaces an older store in ``out_dir``. Returns META."""
    relabelled, perm, ranges = relabel(graph, chunk_of, num_chunks)
    return write_store(relabelled, perm, ranges, out_dir, method=f"isolated-{method}", dataset=dataset, seed=seed,
                       overwrite=True, extra={"isolated_chunks": num_chunks})  # fmt: skip


@dataclass(kw_only=True)
class SuperEpochData:
    """What one rank trains on during one super-epoch (on the CPU until ``to``)."""

    super_epoch: int
    chunks: tuple[int, ...]
    """Chunk ids, primary first, the neighbour last."""
    graph: RankGraph
    """The local subgraph held whole; its ``nodes.train_mask`` marks the loss rows (primary
    training nodes) and ``node_ids`` the dataset's original ids (dropout masks)."""
    weights: torch.Tensor  # float32 [m], loss weight of each loss row
    coverage: float
    """Mean fraction of in-edges present over the loss rows."""
    load_time_s: float

    def to(self, device: torch.device, dtype: torch.dtype) -> "SuperEpochData":
        return dataclasses.replace(self, graph=self.graph.to(device, dtype), weights=self.weights.to(device))


class ChunkLoader:
    """Loads rank ``rank``'s subgraph of any super-epoch from a chunk store (thread-safe to call from
    one background thread while the main thread trains)."""

    def __init__(
        self,
        store_dir: str,
        schedule: RotationSchedule,
        rank: int,
        *,
        correction: str,
        layers: int,
        device: torch.device,
        dtype: torch.dtype,
        verify: bool = True,
    ):
        meta = read_meta(store_dir)
        if meta["num_parts"] != schedule.num_chunks:
            raise ValueError(
                f"{os.path.join(store_dir, 'META.json')}: {meta['num_parts']} chunks in the store, "
                f"{schedule.num_chunks} expected; rewrite it (delete the folder)"
            )
        self.store_dir, self.schedule, self.rank = store_dir, schedule, rank
        self.correction, self.layers = correction, layers
        self.device, self.dtype, self.verify = device, dtype, verify
        self.chunk_ranges = np.asarray(meta["node_ranges"], dtype=np.int64)  # [C, 2]
        self.perm = load_permutation(store_dir, verify)  # [N] relabelled id -> original id (memory-mapped)
        self.primary = [load_part(store_dir, c, schedule.num_chunks, verify) for c in schedule.primary_chunks(rank)]
        self.cycle = cycle_coverage(self.primary, self.chunk_ranges, schedule, rank)  # [S, n_primary]

    def load(self, super_epoch: int) -> SuperEpochData:
        """The super-epoch's subgraph and loss weights, on the loader's device."""
        start = time.perf_counter()
        schedule = self.schedule
        chunks = schedule.chunks(self.rank, super_epoch)
        neighbours = [load_part(self.store_dir, c, schedule.num_chunks, self.verify) for c in chunks[len(self.primary):]]
        sub = induced_subgraph(self.primary + neighbours, len(self.primary), chunks)
        graph, n_primary = sub.graph, int(sub.primary.sum())
        loss_mask = sub.primary & graph.train_mask
        train_primary = graph.train_mask[:n_primary]
        cycle = torch.from_numpy(self.cycle[:, train_primary.numpy()])  # [S, m]
        coverage = sub.coverage[loss_mask]
        weights = correction_weights(coverage, cycle, self.correction, self.layers, schedule.expected_coverage)
        local = whole_graph(graph)
        local.nodes = dataclasses.replace(
            local.nodes, train_mask=loss_mask,
            node_ids=torch.from_numpy(np.asarray(self.perm[sub.node_ids.numpy()], dtype=np.int64)),
        )  # fmt: skip
        data = SuperEpochData(super_epoch=super_epoch, chunks=tuple(chunks), graph=local, weights=weights,
                              coverage=float(coverage.mean()) if coverage.numel() else 1.0, load_time_s=0.0)  # fmt: skip
        data = data.to(self.device, self.dtype)
        data.load_time_s = time.perf_counter() - start
        return data


class ChunkPrefetcher:
    """Hands out super-epochs' data; with ``enabled`` the next one is loaded in a background thread.

    ``get(s)`` returns ``(data, stall_s)``: the seconds training waited for the switch (the whole
    load without prefetch; only what the background load had not finished yet with it).
    """

    def __init__(self, loader: ChunkLoader, enabled: bool):
        self.loader = loader
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dsgraph-chunks") if enabled else None
        self.pending: dict[int, Future] = {}

    def get(self, super_epoch: int) -> tuple[SuperEpochData, float]:
        start = time.perf_counter()
        future = self.pending.pop(super_epoch, None)
        data = future.result() if future is not None else self.loader.load(super_epoch)
        return data, time.perf_counter() - start

    def prefetch(self, super_epoch: int) -> None:
        if self.pool is not None and super_epoch not in self.pending:
            self.pending[super_epoch] = self.pool.submit(self.loader.load, super_epoch)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pending.clear()
