"""Isolated training out of core: the chunks are a partition store's parts (``dsgraph partition``),
and a rank trains on one chunk pair at a time.

In super-epoch s a rank holds the C / W chunks of its group in the round-robin schedule, that is
C / (2 W) pairs. With ``partitions`` set, it no longer holds them all at once: each pair, with its
halo cache, is one local subgraph, loaded from the store when its turn comes (the next one is read
ahead in a background thread) and dropped after its mini-batches. So the memory a rank needs is
that of one pair (about 2 N / C nodes and the in-edges among them and their halo), whatever the
graph's size. With C = 2 W (the default chunk count) a rank holds one pair, and training equals the
in-memory path's on the same chunks (tested).

What changes against holding the whole group:

- Edges between two different pairs of the rank are left out (each pair is its own subgraph).
- Every rank memory-maps the store, so a halo row's features are read from the part that owns it:
  no halo exchange between ranks. The parts' pages are released after every read (``release_pages``),
  so what was read does not stay in the rank's resident memory.
- The expected share of a node's in-edges that its subgraph keeps (the correction's E[kept]) is the
  pairing's own, in closed form: over the C - 1 rounds a node's chunk meets every other chunk once,
  so E[kept] = own + (degree - own) / (C - 1), ``own`` being its in-edges from its own chunk. The
  halo's extra edges count in ``kept`` but not in that expectation. 'uniform' takes the pair's
  training nodes' share.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch

from dsgraph.graph.loading import block_with_self_loops
from dsgraph.graph.npz_map import release_pages
from dsgraph.graph.rank_graph import whole_graph
from dsgraph.graph.store import LocalPart, load_part, load_permutation, read_meta
from dsgraph.modes.isolated.chunk_store import HaloExchange, LoadSettings, SuperEpochData
from dsgraph.modes.isolated.chunks import (
    BlockRows,
    GraphBlock,
    RotationSchedule,
    correction_weights,
    halo_budget,
    halo_of_rows,
    local_subgraph,
)


def store_chunk_count(store_dir: str, chunks: int, world_size: int) -> int:
    """The store's part count, the run's chunk count C; ``chunks`` (the config's) must be 0 or C."""
    parts = int(read_meta(store_dir)["num_parts"])
    if parts % 2:
        raise ValueError(
            f"the partition store {store_dir} has {parts} parts; isolated mode trains its chunks in pairs, so it "
            "needs an even part count: repartition with `dsgraph partition --parts C` for an even C"
        )
    if chunks not in (0, parts):
        raise ValueError(
            f"isolated 'chunks' is {chunks}, but the partition store {store_dir} has {parts} parts (its chunks); "
            "set 'chunks' to 0 or to the part count, or repartition with `dsgraph partition --parts C`"
        )
    return parts


def part_csr(part: LocalPart, self_loops: bool) -> tuple[np.ndarray, np.ndarray]:
    """(rowptr, col) of a part's rows, copied out of the store, with a self loop added to every row
    that has none when ``self_loops``."""
    rowptr, col = np.asarray(part.rowptr), np.asarray(part.col)
    if not self_loops:
        return rowptr.copy(), col.copy()
    rowptr_t, col_t, _ = block_with_self_loops(rowptr, col, part.start)
    return rowptr_t.numpy(), col_t.numpy()


def _release(part: LocalPart) -> None:
    for array in (part.rowptr, part.col, part.x, part.y, part.train_mask, part.val_mask, part.test_mask, part.halo):
        release_pages(array)


class StorePairs:
    """Loads rank ``rank``'s chunk pairs of any super-epoch from a partition store (thread-safe to
    call from one background thread while the main thread trains)."""

    def __init__(
        self,
        store_dir: str,
        schedule: RotationSchedule,
        rank: int,
        settings: LoadSettings,
        *,
        device: torch.device,
        dtype: torch.dtype,
    ):
        self.meta = read_meta(store_dir)
        if self.meta["num_parts"] != schedule.num_chunks:
            raise ValueError(f"{store_dir}: {self.meta['num_parts']} parts, {schedule.num_chunks} chunks expected")
        self.store_dir, self.schedule, self.rank, self.settings = store_dir, schedule, rank, settings
        self.device, self.dtype = device, dtype
        self.chunk_ends = np.asarray(self.meta["node_ranges"], dtype=np.int64)[:, 1]  # [C]
        self.perm = load_permutation(store_dir)  # relabelled id -> dataset id (memory-mapped)
        release_pages(self.perm)
        self._parts: dict[int, LocalPart] = {}
        self.train_counts = [self._train_count(c) for c in range(schedule.num_chunks)]  # [C]

    def _train_count(self, chunk: int) -> int:
        mask = self._part(chunk).train_mask
        count = int(np.count_nonzero(mask))
        release_pages(mask)
        return count

    def _part(self, chunk: int) -> LocalPart:
        """Chunk ``chunk``'s part, memory-mapped (checked against META.json once), its pages released."""
        if chunk not in self._parts:
            part = load_part(self.store_dir, chunk, self.schedule.num_chunks, encodings=())
            _release(part)
            self._parts[chunk] = part
        return self._parts[chunk]

    def pairs(self, super_epoch: int) -> list[tuple[int, int]]:
        """The chunk pairs (each sorted) this rank trains on, in order, in ``super_epoch``."""
        s = self.schedule
        half = s.chunks_per_rank // 2
        group = s.group(self.rank, super_epoch)
        return [tuple(sorted(pair)) for pair in s.pairs(super_epoch)[group * half : (group + 1) * half]]

    def rank_train_counts(self, super_epoch: int) -> list[int]:
        """Training nodes each rank computes the loss of in ``super_epoch``."""
        s = self.schedule
        return [sum(self.train_counts[c] for c in s.chunks(r, super_epoch)) for r in range(s.world_size)]

    def pair_train_counts(self, super_epoch: int) -> list[int]:
        return [self.train_counts[a] + self.train_counts[b] for a, b in self.pairs(super_epoch)]

    def _block(self, chunk: int) -> tuple[GraphBlock, np.ndarray]:
        """The chunk's rows with their in-edges (self loops added where the model wants them), copied
        out of the store, and how many of each row's in-edges come from the chunk itself."""
        part = self._part(chunk)
        rowptr, col = part_csr(part, self.settings.halo_self_loops)
        inside = np.concatenate(([0], np.cumsum((col >= part.start) & (col < part.end))))
        own = inside[rowptr[1:]] - inside[rowptr[:-1]]
        block = GraphBlock(
            start=part.start,
            end=part.end,
            rowptr=rowptr,
            col=col,
            x=np.array(part.x),
            y=np.array(part.y),
            train_mask=np.array(part.train_mask),
            val_mask=np.array(part.val_mask),
            test_mask=np.array(part.test_mask),
        )
        _release(part)
        return block, own

    def _features(self, ids: np.ndarray) -> np.ndarray:
        """float32 [len(ids), F]: the features of nodes ``ids`` (relabelled), read from their parts."""
        chunk = np.searchsorted(self.chunk_ends, ids, side="right")
        out = np.empty((ids.size, int(self.meta["num_features"])), dtype=np.float32)
        for c in np.unique(chunk):
            mine, part = chunk == c, self._part(int(c))
            out[mine] = part.x[ids[mine] - part.start]
            release_pages(part.x)
        return out

    def _orders(self, super_epoch: int, index: int, loss_rows: np.ndarray) -> torch.Tensor:
        """int64 [epochs, m]: the loss rows shuffled for each epoch of the super-epoch (keyed by seed,
        epoch and the pair's place)."""
        cfg = self.settings
        first = super_epoch * cfg.repart_every
        epochs = range(first, max(min(first + cfg.repart_every, cfg.epochs), first + 1))
        orders = [loss_rows[np.random.default_rng((cfg.seed, e, index)).permutation(loss_rows.size)] for e in epochs]
        return torch.from_numpy(np.stack(orders))

    def load(self, super_epoch: int, index: int) -> SuperEpochData:
        """Pair ``index`` of ``super_epoch``: its subgraph with its halo's features, loss weights and
        batch orders, on the loader's device."""
        start, cfg = time.perf_counter(), self.settings
        chunks = self.pairs(super_epoch)[index]
        blocks, owns = zip(*(self._block(c) for c in chunks))
        rows = BlockRows(blocks)
        halo_ids = halo_of_rows(rows, halo_budget(rows.num_rows, cfg.halo_fraction))
        sub = local_subgraph(blocks, halo_ids, halo_self_loops=cfg.halo_self_loops, chunks=chunks, rows=rows)
        del blocks, rows  # their copies of the rows' edges and features: the subgraph has its own
        graph = sub.graph
        graph.x[sub.num_own :] = torch.from_numpy(self._features(halo_ids))
        loss = graph.train_mask[: sub.num_own].numpy()
        own = np.concatenate(owns)
        rounds = max(self.schedule.num_chunks - 1, 1)
        expected = own + (sub.degree - own) / rounds
        share = float(expected[loss].sum() / max(sub.degree[loss].sum(), 1))
        weights = correction_weights(
            cfg.correction,
            degree=sub.degree[loss],
            kept=sub.kept[loss],
            expected=expected[loss],
            layers=cfg.layers,
            uniform_share=share if share > 0 else 1.0,
        )
        row_weights = torch.zeros(graph.num_nodes, dtype=torch.float32)
        row_weights[: sub.num_own][torch.from_numpy(loss)] = weights
        local = whole_graph(graph)
        ids = sub.node_ids.numpy()
        original = np.asarray(self.perm[ids], dtype=np.int64)  # dropout masks use the dataset's ids
        release_pages(self.perm)
        local.nodes = dataclasses.replace(local.nodes, node_ids=torch.from_numpy(original))
        kept_share = sub.kept[loss] / np.maximum(sub.degree[loss], 1)
        data = SuperEpochData(
            super_epoch=super_epoch,
            chunks=tuple(chunks),
            graph=local,
            row_weights=row_weights,
            orders=self._orders(super_epoch, index, np.flatnonzero(loss)),
            halo=HaloExchange.none(),
            coverage=float(kept_share.mean()) if kept_share.size else 1.0,
            halo_hits=sub.halo_hits,
            halo_misses=sub.halo_misses,
            load_time_s=0.0,
            halo_read=int(halo_ids.size),
        )
        data = data.to(self.device, self.dtype)
        data.load_time_s = time.perf_counter() - start
        return data
