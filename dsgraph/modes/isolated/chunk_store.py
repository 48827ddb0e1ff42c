"""The chunk store of isolated training, the loading of one super-epoch's local subgraph, and the
halo exchange that fills its cache.

The graph, relabelled so every chunk is one id range, is written once as a partition store with C
parts (``write_chunk_store``). Every rank memory-maps every chunk (checked against META.json,
sha256 included) and builds the same ``CyclePlan``: the halo cache of every group of chunks in
every round and what each node keeps on average. For super-epoch s a rank takes the chunks the
round-robin schedule gives it, builds their local subgraph with its halo rows, weights its training
nodes and shuffles them for each epoch (``ChunkLoader.load``). ``ChunkPrefetcher`` runs the next
load in a background thread while the current super-epoch trains. At the switch, in the main
thread, ``exchange_halo`` fills the halo: features the rank held in the previous super-epoch are
copied, the others come from the ranks that hold them in one uneven all-to-all (with two ranks, the
all-gather of the seed's section 2.2).
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
from dsgraph.modes.isolated.chunks import BlockRows, RotationSchedule, correction_weights, cycle_plan, local_subgraph

COMM_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def write_chunk_store(
    graph: Graph, chunk_of: np.ndarray, num_chunks: int, out_dir: str, *, method: str, seed: int, dataset: str
) -> dict:
    """Writes ``graph`` (self loops already added if the model wants them) relabelled by chunk as a
    store with one part per chunk; replaces an older store in ``out_dir``. Returns META."""
    relabelled, perm, ranges = relabel(graph, chunk_of, num_chunks)
    return write_store(
        relabelled,
        perm,
        ranges,
        out_dir,
        method=f"isolated-{method}",
        dataset=dataset,
        seed=seed,
        overwrite=True,
        extra={"isolated_chunks": num_chunks},
    )


@dataclass(kw_only=True)
class HaloExchange:
    """This rank's halo traffic at the start of one super-epoch. A halo node whose features this
    rank held in the previous super-epoch (an own row or a halo row) is copied from there
    (``reuse_*``); the others arrive from the ranks that hold them, grouped by sender, into
    ``recv_rows``. Every rank can tell what every other rank held, so the senders leave those out."""

    send_rows: torch.Tensor  # int64 [sum(send_counts)]: local rows to send, grouped by destination rank
    send_counts: list[int]  # [W]
    recv_rows: torch.Tensor  # int64 [sum(recv_counts)]: halo rows filled by the exchange, grouped by sender
    recv_counts: list[int]  # [W]
    reuse_src: torch.Tensor  # int64 [u]: rows of the previous super-epoch's data ...
    reuse_dst: torch.Tensor  # int64 [u]: ... copied into these halo rows
    any_rank: bool  # whether any rank caches anything this super-epoch (then every rank takes part)

    @classmethod
    def none(cls) -> HaloExchange:
        """No traffic: the halo rows were filled when the data was loaded (``store_pairs``)."""
        empty, zeros = torch.zeros(0, dtype=torch.int64), []
        return cls(
            send_rows=empty,
            send_counts=zeros,
            recv_rows=empty,
            recv_counts=zeros,
            reuse_src=empty,
            reuse_dst=empty,
            any_rank=False,
        )

    def to(self, device: torch.device) -> HaloExchange:
        return dataclasses.replace(
            self,
            **{name: getattr(self, name).to(device) for name in ("send_rows", "recv_rows", "reuse_src", "reuse_dst")},
        )


@dataclass(kw_only=True)
class SuperEpochData:
    """What one rank trains on during one super-epoch (on the CPU until ``to``)."""

    super_epoch: int
    chunks: tuple[int, ...]
    graph: RankGraph
    """The local subgraph held whole: own rows, then halo rows. ``nodes.train_mask`` marks the loss
    rows and ``node_ids`` the dataset's original ids (dropout masks)."""
    row_weights: torch.Tensor  # float32 [n]: loss weight of each row (0 outside the loss rows)
    orders: torch.Tensor  # int64 [epochs, m]: the loss rows in each epoch's shuffled order
    halo: HaloExchange
    coverage: float
    """Mean share of in-edges present over the loss rows."""
    halo_hits: int  # in-edges of own rows served by the halo cache
    halo_misses: int  # cross-chunk in-edges of own rows left out
    load_time_s: float
    halo_read: int = 0
    """Halo rows whose features were read from the store at load (none arrive by exchange then)."""

    @property
    def halo_nodes(self) -> int:
        return sum(self.halo.recv_counts) + self.halo.reuse_dst.numel() + self.halo_read

    def to(self, device: torch.device, dtype: torch.dtype) -> SuperEpochData:
        return dataclasses.replace(
            self,
            graph=self.graph.to(device, dtype),
            row_weights=self.row_weights.to(device),
            orders=self.orders.to(device),
            halo=self.halo.to(device),
        )


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """How a ChunkLoader builds each super-epoch (from the config)."""

    correction: str
    layers: int
    halo_fraction: float
    halo_self_loops: bool
    repart_every: int
    epochs: int
    seed: int


class ChunkLoader:
    """Loads rank ``rank``'s subgraph of any super-epoch from a chunk store (thread-safe to call from
    one background thread while the main thread trains)."""

    def __init__(
        self,
        store_dir: str,
        schedule: RotationSchedule,
        rank: int,
        settings: LoadSettings,
        *,
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
        self.schedule, self.rank, self.settings = schedule, rank, settings
        self.device, self.dtype = device, dtype
        self.chunk_ends = np.asarray(meta["node_ranges"], dtype=np.int64)[:, 1]  # [C]
        self.perm = load_permutation(store_dir, verify)  # [N] relabelled id -> original id (memory-mapped)
        self.parts = [
            load_part(store_dir, c, schedule.num_chunks, verify, encodings=None) for c in range(schedule.num_chunks)
        ]
        self.plan = cycle_plan(self.parts, schedule, settings.halo_fraction)
        self.train_counts = [int(np.count_nonzero(p.train_mask)) for p in self.parts]  # [C]

    def rank_train_counts(self, super_epoch: int) -> list[int]:
        """Training nodes each rank computes the loss of in ``super_epoch``."""
        s = self.schedule
        return [sum(self.train_counts[c] for c in s.chunks(r, super_epoch)) for r in range(s.world_size)]

    def _halo_ids(self, rank: int, super_epoch: int, holders: np.ndarray) -> np.ndarray:
        """``rank``'s halo ids, ordered by the rank that holds them (then by id)."""
        ids = self.plan.halo_of(self.schedule, rank, super_epoch)
        owner = holders[np.searchsorted(self.chunk_ends, ids, side="right")]
        return ids[np.argsort(owner, kind="stable")]

    def _layout(self, rank: int, super_epoch: int) -> np.ndarray:
        """int64: the relabelled id of every local row of ``rank`` in ``super_epoch`` (own, then halo)."""
        chunks = self.schedule.chunks(rank, super_epoch)
        halo = self._halo_ids(rank, super_epoch, self.schedule.holders(super_epoch))
        own = [np.arange(self.parts[c].start, self.parts[c].end, dtype=np.int64) for c in chunks]
        return np.concatenate([*own, halo])

    def _exchange(
        self, super_epoch: int, rows: BlockRows, halo_ids: np.ndarray, holders: np.ndarray, reuse: bool
    ) -> HaloExchange:
        """What every other rank's halo needs of this rank's rows, and where this rank's halo rows
        come from; with ``reuse``, what a rank held in ``super_epoch - 1`` is not sent to it again."""
        world, empty = self.schedule.world_size, np.zeros(0, dtype=np.int64)
        held = [np.sort(self._layout(q, super_epoch - 1)) if reuse else empty for q in range(world)]
        send = [empty] * world
        for q in range(world):
            if q != self.rank:
                ids = self._halo_ids(q, super_epoch, holders)
                local = rows.local(ids[~np.isin(ids, held[q])])
                send[q] = local[local >= 0]
        fetch = ~np.isin(halo_ids, held[self.rank])  # [h] halo rows that travel; the others are copied
        owner = holders[np.searchsorted(self.chunk_ends, halo_ids, side="right")]
        previous = self._layout(self.rank, super_epoch - 1) if reuse else empty
        order = np.argsort(previous)
        tensor = lambda a: torch.from_numpy(np.asarray(a, dtype=np.int64))  # noqa: E731
        return HaloExchange(
            send_rows=tensor(np.concatenate(send)),
            send_counts=[int(a.size) for a in send],
            recv_rows=tensor(rows.num_rows + np.flatnonzero(fetch)),
            recv_counts=[int(np.count_nonzero(fetch & (owner == q))) for q in range(world)],
            reuse_src=tensor(order[np.searchsorted(previous[order], halo_ids[~fetch])]),
            reuse_dst=tensor(rows.num_rows + np.flatnonzero(~fetch)),
            any_rank=any(ids.size for ids in self.plan.halo[super_epoch % self.schedule.cycle_length]),
        )

    def _encodings_of(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """The encoding arrays (every one the store holds) of nodes ``ids`` (relabelled), read from
        the chunks that own them: every rank maps every chunk, so a halo row's encodings need no
        exchange."""
        chunk = np.searchsorted(self.chunk_ends, ids, side="right")
        out = {}
        for name, first in self.parts[0].enc.items():
            rows = np.empty((ids.size, first.shape[1]), dtype=first.dtype)
            for c in np.unique(chunk):
                mine = chunk == c
                rows[mine] = self.parts[c].enc[name][ids[mine] - self.parts[c].start]
            out[name] = rows
        return out

    def _orders(self, super_epoch: int, loss_rows: np.ndarray) -> torch.Tensor:
        """int64 [epochs, m]: the loss rows shuffled for each epoch of the super-epoch (keyed by seed, epoch)."""
        cfg = self.settings
        first = super_epoch * cfg.repart_every
        epochs = range(first, max(min(first + cfg.repart_every, cfg.epochs), first + 1))
        orders = [loss_rows[np.random.default_rng((cfg.seed, e)).permutation(loss_rows.size)] for e in epochs]
        return torch.from_numpy(np.stack(orders))

    def load(self, super_epoch: int, reuse: bool = False) -> SuperEpochData:
        """The super-epoch's subgraph, loss weights, batch orders and halo plan, on the loader's
        device; with ``reuse`` the halo exchange expects the previous super-epoch's data at hand."""
        start, cfg = time.perf_counter(), self.settings
        chunks = self.schedule.chunks(self.rank, super_epoch)
        holders = self.schedule.holders(super_epoch)
        blocks = [self.parts[c] for c in chunks]
        rows, halo_ids = BlockRows(blocks), self._halo_ids(self.rank, super_epoch, holders)
        sub = local_subgraph(
            blocks,
            halo_ids,
            halo_self_loops=cfg.halo_self_loops,
            chunks=chunks,
            rows=rows,
            halo_enc=self._encodings_of(halo_ids),
        )
        graph, own = sub.graph, sub.node_ids[: sub.num_own].numpy()
        loss = graph.train_mask[: sub.num_own].numpy()
        weights = correction_weights(
            cfg.correction,
            degree=sub.degree[loss],
            kept=sub.kept[loss],
            expected=self.plan.expected_kept[own[loss]],
            layers=cfg.layers,
            uniform_share=self.plan.uniform_share,
        )
        row_weights = torch.zeros(graph.num_nodes, dtype=torch.float32)
        row_weights[: sub.num_own][torch.from_numpy(loss)] = weights
        local = whole_graph(graph, edge_features=graph.edge_attr is not None)
        original = np.asarray(self.perm[sub.node_ids.numpy()], dtype=np.int64)  # dropout masks use the dataset's ids
        local.nodes = dataclasses.replace(local.nodes, node_ids=torch.from_numpy(original))
        share = sub.kept[loss] / np.maximum(sub.degree[loss], 1)
        data = SuperEpochData(
            super_epoch=super_epoch,
            chunks=tuple(chunks),
            graph=local,
            row_weights=row_weights,
            orders=self._orders(super_epoch, np.flatnonzero(loss)),
            halo=self._exchange(super_epoch, rows, halo_ids, holders, reuse),
            coverage=float(share.mean()) if share.size else 1.0,
            halo_hits=sub.halo_hits,
            halo_misses=sub.halo_misses,
            load_time_s=0.0,
        )
        data = data.to(self.device, self.dtype)
        data.load_time_s = time.perf_counter() - start
        return data


def exchange_halo(data: SuperEpochData, previous: SuperEpochData | None, pg, dtype: torch.dtype) -> int:
    """Fills the halo rows of ``data``'s features: copies what ``previous`` (the super-epoch before)
    held, receives the rest from the ranks that hold those nodes (one uneven all-to-all in
    ``dtype``; every rank of ``pg`` takes part). Returns the bytes this rank sent."""
    halo, x = data.halo, data.graph.nodes.x  # x [n, F]: own rows, then the halo rows
    if halo.reuse_dst.numel():
        if previous is None or previous.super_epoch != data.super_epoch - 1:
            raise RuntimeError(
                f"super-epoch {data.super_epoch} was loaded to reuse features of the one before, which is not at hand"
            )
        x[halo.reuse_dst] = previous.graph.nodes.x[halo.reuse_src]
    if pg.world_size == 1 or not halo.any_rank:
        return 0
    import deepspeed.comm as dist

    send = x[halo.send_rows].to(dtype).contiguous()
    recv = torch.empty((halo.recv_rows.numel(), x.shape[1]), dtype=dtype, device=x.device)
    dist.all_to_all_single(
        recv, send, output_split_sizes=halo.recv_counts, input_split_sizes=halo.send_counts, group=pg.group
    )
    x[halo.recv_rows] = recv.to(x.dtype)
    return send.numel() * send.element_size()


class ChunkPrefetcher:
    """Hands out super-epochs' data; with ``enabled`` the next one is loaded in a background thread.

    ``get(s, key)`` returns ``(data, stall_s)``: the seconds training waited for the switch (the whole
    load without prefetch; only what the background load had not finished yet with it). ``key`` is
    the loader's second argument: ``reuse`` for a ``ChunkLoader``, a pair's index for ``StorePairs``.
    """

    def __init__(self, loader: ChunkLoader, enabled: bool):
        self.loader = loader
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dsgraph-chunks") if enabled else None
        self.pending: dict[tuple[int, bool], Future] = {}

    def get(self, super_epoch: int, key) -> tuple[SuperEpochData, float]:
        start = time.perf_counter()
        future = self.pending.pop((super_epoch, key), None)
        for old in [k for k in self.pending if k[0] <= super_epoch]:  # loads the run no longer needs
            self.pending.pop(old).cancel()
        data = future.result() if future is not None else self.loader.load(super_epoch, key)
        return data, time.perf_counter() - start

    def prefetch(self, super_epoch: int, key) -> None:
        if self.pool is not None and (super_epoch, key) not in self.pending:
            self.pending[(super_epoch, key)] = self.pool.submit(self.loader.load, super_epoch, key)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pending.clear()
