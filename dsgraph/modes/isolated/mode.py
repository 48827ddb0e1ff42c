"""Isolated (Grappa-style) training, mode 'isolated': every rank trains on its chunks' local
subgraph (plus a halo cache) with one-rank attention, so a training step moves no activations.
The chunks rotate round-robin every ``isolated.repart_every`` epochs (a super-epoch; see
``dsgraph.modes.isolated.chunks``); the next super-epoch is loaded ahead by a background thread and its
halo features arrive at the switch.

Each epoch is a pass over the rank's training nodes in ``isolated.batch_size`` mini-batches (the
same number of batches on every rank), each one optimizer step on the whole local subgraph with the
loss on the batch: ``sum_i c_i * loss_i / |B|`` (the seed's batch-level correction, c from
``isolated.correction``).

- ``isolated.sync: "super_epoch"`` (the default, Grappa's): the steps are local (no collective) and
  the ranks average their parameters after the last step of each super-epoch (``sync.LocalSteps``:
  weighted by training nodes, the change since the last boundary sent in ``isolated.comm_dtype``).
  Adam's moments are not averaged: each rank keeps its own (they describe its own gradients), so a
  boundary sends the parameters once and nothing else. Gradient clipping uses the rank's own norm.
  This needs ZeRO stage 0 in fp32 (the rank holds the whole optimizer state); other engines are
  refused with a message naming the fix.
- ``isolated.sync: "step"``: DeepSpeed reduces the gradients in every step; the loss is then
  ``sum_i c_i * loss_i * W / sum_r |B_r|``, the mean over the global batch.

Global attention (model option ``global_attention``) spans the rank's local subgraph (its chunks and
their halo) in a training step, with no collective: the step stays local; evaluation spans the
whole graph.

Evaluation is the normal full-graph path (the configured strategy over all ranks, on the same loaded
dataset), so accuracy compares directly with the other modes; with local steps it runs only at
super-epoch boundaries, where the ranks' parameters agree. A step row's ``loss`` and ``train_acc``
cover this rank's batch only (a global value would need a collective in the step).

With ``partitions`` (a partition store) nothing is loaded whole: the store's parts are the chunks,
and each rank trains on one chunk pair at a time, read from the store (``store_pairs.py``, out of
core). Evaluation then runs pair by pair too, over the pairs of super-epoch 0 (every node once, in
its pair's subgraph with its halo): the local view's accuracy, the same at every evaluation.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass

from dsgraph.graph import encodings, load_dataset
from dsgraph.graph.loading import raise_if_any_rank_failed
from dsgraph.graph.store import read_meta
from dsgraph.modes.base import EvalBatch, Mode, Step
from dsgraph.modes.isolated.chunk_store import (
    COMM_DTYPES,
    ChunkLoader,
    ChunkPrefetcher,
    LoadSettings,
    SuperEpochData,
    exchange_halo,
    write_chunk_store,
)
from dsgraph.modes.isolated.chunks import (
    RotationSchedule,
    assign_chunks,
    batch_sizes,
    default_num_chunks,
    num_batches,
    super_epoch_of,
)
from dsgraph.modes.isolated.config import IsolatedConfig
from dsgraph.modes.isolated.local_steps import LocalSteps
from dsgraph.modes.isolated.pair_memory import alternatives as pair_alternatives
from dsgraph.modes.isolated.pair_memory import predict_isolated
from dsgraph.modes.isolated.store_pairs import StorePairs, store_chunk_count
from dsgraph.modes.ranks import GraphOnRanks, check_store_features, edge_features, local_attention
from dsgraph.modes.sync import EveryStep


@dataclass(frozen=True, slots=True)
class _EpochPlan:
    """What the mini-batch steps of one epoch share."""

    epoch: int
    batches: int  # mini-batches per epoch, the same on every rank
    counts: list[int]  # training nodes of every rank in this super-epoch
    boundary: bool  # the epoch ends a super-epoch (or the run)
    stall_s: float  # the switch's wait for the load, if the epoch starts a super-epoch
    halo_time_s: float  # the switch's halo exchange
    halo_bytes: int  # what the halo exchange sent
    global_counts: list[int]  # loss rows of each mini-batch over all ranks (cut as tensor_split does)
    last_unit: bool = True  # the steps are the epoch's last subgraph's (a pair's, from a store)


class Isolated(Mode):
    """``switch_times`` lists (super-epoch, stall seconds, load seconds) of every switch."""

    name = "isolated"
    section, Config = "isolated", IsolatedConfig

    @classmethod
    def check_config(cls, cfg) -> None:
        isolated = cfg.isolated
        isolated.check_run(partitions=cfg.partitions, eval_every=cfg.eval_every, checkpoint_every=cfg.checkpoint_every)
        check_store_features(cfg, "isolated")

    @classmethod
    def predict_memory(cls, cfg, dtype_bytes, world_size):
        return predict_isolated(cfg, dtype_bytes)

    @classmethod
    def memory_alternatives(cls, cfg, predicted, dtype_bytes, world_size, limit_mb):
        return pair_alternatives(cfg, predicted, limit_mb)

    @classmethod
    def can_checkpoint(cls, cfg, epoch: int) -> bool:
        """With super-epoch sync only at super-epoch boundaries (the ranks' parameters differ between them)."""
        return cfg.isolated.sync != "super_epoch" or (epoch + 1) % cfg.isolated.repart_every == 0

    def __init__(self, cfg, pg, control, log, heartbeat, task=None):
        """``task`` is not read: the isolated mode trains node tasks (the others refuse it in their checks)."""
        self.cfg, self.control, self.heartbeat = cfg, control, heartbeat
        self.from_store = cfg.partitions is not None
        if self.from_store:
            chunks = store_chunk_count(cfg.partitions, cfg.isolated.chunks, pg.world_size)
        else:
            chunks = default_num_chunks(cfg.isolated.chunks, pg.world_size)
        self.schedule = RotationSchedule(chunks, pg.world_size)
        self.data: SuperEpochData | None = None
        self.switch_times: list[tuple[int, float, float]] = []
        self.local = cfg.isolated.sync == "super_epoch"
        if self.from_store:
            self._open_store(pg, log)
        else:
            self._load_whole(pg, control, log, heartbeat)
        s = self.schedule
        unit = "one pair at a time" if self.from_store else "all at once"
        log(
            f"isolated: {s.num_chunks} {'store' if self.from_store else cfg.isolated.chunk_method} chunks, "
            f"{s.chunks_per_rank} per rank ({unit}), rotating round-robin "
            f"every {cfg.isolated.repart_every} epochs (cycle {s.cycle_length} super-epochs), sync every "
            f"{'super-epoch' if self.local else 'step'}, batches of {cfg.isolated.batch_size or 'all'}, "
            f"halo cache {cfg.isolated.halo_fraction:.0%}, correction '{cfg.isolated.correction}', "
            f"prefetch {'on' if cfg.isolated.prefetch else 'off'}, store {self.store_dir}"
        )

    def _open_store(self, pg, log) -> None:
        """The sizes of a partition store's graph; nothing of it is loaded yet."""
        cfg = self.cfg
        meta = read_meta(cfg.partitions)
        self.pg, self.eval_ranks, self.store_dir = pg, None, cfg.partitions
        self.num_features, self.num_classes = int(meta["num_features"]), int(meta["num_classes"])
        self.num_edge_features, self.encoding_widths = 0, {}
        bound = (self.schedule.num_chunks - 1) ** cfg.layers
        if cfg.isolated.correction in ("resample", "coverage") and bound > 100:
            log(
                f"isolated: warning: correction '{cfg.isolated.correction}' weighs a node by how little of its "
                f"neighbourhood its pair keeps, up to (C - 1)^L = {bound:,} with {self.schedule.num_chunks} chunks: "
                "a few nodes then dominate the loss; 'uniform' or 'none' keep the weights even"
            )

    def _load_whole(self, pg, control, log, heartbeat) -> None:
        """The dataset loaded whole, split for full-graph evaluation, and written as a chunk store."""
        cfg = self.cfg
        heartbeat("start-up: loading the graph")
        graph = edge_features(
            load_dataset(cfg.dataset, seed=cfg.seed, choice=cfg.split_choice()), cfg.model.reads_edges, cfg.dataset
        )
        graph = encodings.select(graph, encodings.arrays_of(cfg.model.encodings), cfg.dataset, cfg.seed)
        self.encoding_widths = encodings.widths(graph.enc)
        if graph.multilabel:
            raise ValueError(
                f"dataset '{cfg.dataset}' has multi-label targets [N, T], which mode 'isolated' does not train yet; "
                "use mode 'full' (any strategy)"
            )
        graph = graph.with_self_loops() if cfg.adds_self_loops else graph
        self.eval_ranks = GraphOnRanks(cfg, pg, control, log, graph=graph)  # full-graph evaluation, same data
        self.pg = self.eval_ranks.pg
        self.num_features, self.num_classes, self.num_edge_features = (
            graph.num_features,
            graph.num_classes,
            graph.num_edge_features,
        )
        heartbeat("start-up: writing the chunk store")
        self.store_dir = self._write_store(graph)

    def _write_store(self, graph) -> str:
        """Rank 0 chooses the chunks; with ``isolated.store`` rank 0 writes the store there, otherwise
        every rank writes its own copy in a temporary folder (removed at exit)."""
        cfg, rank = self.cfg, self.pg.rank
        num_chunks = self.schedule.num_chunks
        chunk_of = assign_chunks(graph, num_chunks, cfg.isolated.chunk_method, cfg.seed) if rank == 0 else None
        chunk_of = self.control.bcast(chunk_of, root=0)
        if cfg.isolated.store is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"dsgraph-chunks-r{rank}-")
            store_dir, writer = os.path.join(self._tmp.name, "store"), True
        else:
            store_dir, writer = cfg.isolated.store, rank == 0
        error = None
        if writer:
            try:
                write_chunk_store(
                    graph,
                    chunk_of,
                    num_chunks,
                    store_dir,
                    method=cfg.isolated.chunk_method,
                    seed=cfg.seed,
                    dataset=cfg.dataset,
                )
            except (ValueError, OSError) as err:
                error = ValueError(f"writing the chunk store {store_dir} failed: {err}")
        raise_if_any_rank_failed(self.control, error)  # also makes the other ranks wait for rank 0's store
        return store_dir

    def step_fields(self, step, summed):
        fields = dict(summed)
        if self.predicted_mb is not None:
            fields["predicted_peak_mem_mb"] = self.predicted_mb
        return fields

    def sync(self):
        return LocalSteps(COMM_DTYPES[self.cfg.isolated.comm_dtype]) if self.local else EveryStep()

    def attach(self, device, dtype):
        cfg = self.cfg
        if self.eval_ranks is not None:
            self.eval_ranks.attach(device, dtype)
        settings = LoadSettings(
            correction=cfg.isolated.correction,
            layers=cfg.layers,
            halo_fraction=cfg.isolated.halo_fraction,
            halo_self_loops=cfg.adds_self_loops,
            repart_every=cfg.isolated.repart_every,
            epochs=cfg.epochs,
            seed=cfg.seed,
        )
        self.predicted_mb = None  # a CPU rank's predicted peak, from a store only (``pair_memory.py``)
        if self.from_store and device.type == "cpu":
            self.predicted_mb = round(predict_isolated(cfg, dtype.itemsize).total_mb, 1)
        loader = StorePairs if self.from_store else ChunkLoader
        self.loader = loader(self.store_dir, self.schedule, self.pg.rank, settings, device=device, dtype=dtype)
        self.chunks = ChunkPrefetcher(self.loader, cfg.isolated.prefetch)

    def _switch(self, super_epoch: int) -> tuple[float, float, int]:
        """Makes ``super_epoch``'s data current (its halo filled), starts loading the next one;
        returns the stall (seconds waiting for the load), the halo exchange's seconds (with the
        wait for the other ranks to arrive) and the halo bytes this rank sent."""
        previous = self.data
        reuse = previous is not None and previous.super_epoch == super_epoch - 1
        self.data, stall = self.chunks.get(super_epoch, reuse)
        if (super_epoch + 1) * self.cfg.isolated.repart_every < self.cfg.epochs:
            self.chunks.prefetch(super_epoch + 1, True)
        start = time.perf_counter()
        halo_bytes = exchange_halo(self.data, previous, self.pg, COMM_DTYPES[self.cfg.isolated.comm_dtype])
        halo_time = time.perf_counter() - start
        self.attention = local_attention(self.data.graph, self.cfg.backend)
        self.switch_times.append((super_epoch, stall, self.data.load_time_s))
        return stall, halo_time, halo_bytes

    def _batches(self, super_epoch: int) -> tuple[int, list[int]]:
        """(mini-batches per epoch, training nodes of every rank) in ``super_epoch``."""
        counts = self.loader.rank_train_counts(super_epoch)
        return num_batches(counts, self.cfg.isolated.batch_size), counts

    def _steps_per_epoch(self, super_epoch: int) -> int:
        """This rank's steps in an epoch of ``super_epoch`` (from a store: the sum over its pairs)."""
        if not self.from_store:
            return self._batches(super_epoch)[0]
        size = self.cfg.isolated.batch_size
        return sum(num_batches([count], size) for count in self.loader.pair_train_counts(super_epoch))

    def _first_step(self, epoch: int) -> int:
        """Steps of this rank before ``epoch`` (the same on every rank without a store): the dropout
        masks' step key."""
        r = self.cfg.isolated.repart_every
        before = sum(self._steps_per_epoch(s) * r for s in range(super_epoch_of(epoch, r)))
        return before + (epoch % r) * self._steps_per_epoch(super_epoch_of(epoch, r))

    def steps(self, start_epoch, end_epoch=None):
        first = self._first_step(start_epoch)
        for epoch in range(start_epoch, self.cfg.epochs if end_epoch is None else end_epoch):
            yield from self.pair_steps(epoch, first) if self.from_store else self.epoch_steps(epoch, first)
            first += self._steps_per_epoch(super_epoch_of(epoch, self.cfg.isolated.repart_every))

    def pair_steps(self, epoch: int, first_step: int):
        """The epoch's steps from a store: each of the rank's pairs in turn (the next one read ahead),
        its mini-batches, then the pair is dropped."""
        cfg, r = self.cfg, self.cfg.isolated.repart_every
        s = super_epoch_of(epoch, r)
        counts, pairs = self.loader.rank_train_counts(s), self.loader.pairs(s)
        boundary = epoch == min((s + 1) * r, cfg.epochs) - 1
        for i in range(len(pairs)):
            self.data, stall = self.chunks.get(s, i)
            if i + 1 < len(pairs) or epoch + 1 < cfg.epochs:
                after = (s, i + 1) if i + 1 < len(pairs) else (super_epoch_of(epoch + 1, r), 0)
                self.chunks.prefetch(*after)
            self.attention = local_attention(self.data.graph, cfg.backend)
            self.switch_times.append((s, stall, self.data.load_time_s))
            loss_rows = self.data.orders[epoch - s * r]
            batches = num_batches([loss_rows.numel()], cfg.isolated.batch_size)
            last = i + 1 == len(pairs)
            plan = _EpochPlan(
                epoch=epoch,
                batches=batches,
                counts=counts,
                boundary=boundary and last,
                stall_s=stall,
                halo_time_s=0.0,
                halo_bytes=0,
                global_counts=[],  # local steps: each rank's own count
                last_unit=last,
            )
            for j, rows in enumerate(loss_rows.tensor_split(batches)):
                yield self._step(plan, j, rows, first_step)
                first_step += 1
        self.data = self.attention = None  # the last pair's memory goes before evaluation

    def epoch_steps(self, epoch: int, first_step: int) -> list[Step]:
        """The epoch's mini-batch steps; the first one after a switch carries the halo bytes."""
        r = self.cfg.isolated.repart_every
        s = super_epoch_of(epoch, r)
        stall, halo_time, halo_bytes = (
            self._switch(s) if self.data is None or self.data.super_epoch != s else (0.0, 0.0, 0)
        )
        batches, counts = self._batches(s)
        plan = _EpochPlan(
            epoch=epoch,
            batches=batches,
            counts=counts,
            boundary=epoch == min((s + 1) * r, self.cfg.epochs) - 1,
            stall_s=stall,
            halo_time_s=halo_time,
            halo_bytes=halo_bytes,
            global_counts=[sum(sizes) for sizes in zip(*(batch_sizes(c, batches) for c in counts))],
        )
        rows = self.data.orders[epoch - s * r].tensor_split(batches)
        return [self._step(plan, j, rows[j], first_step + j) for j in range(batches)]

    def _step(self, plan: _EpochPlan, j: int, rows, dropout_step: int) -> Step:
        data, last, first = self.data, j == plan.batches - 1, j == 0
        graph, nodes, halo = data.graph, data.graph.nodes, data.halo
        last = last and plan.last_unit
        fields = {
            "super_epoch": data.super_epoch,
            "chunks": list(data.chunks),
            "batch": j,
            "batches": plan.batches,
            "coverage": data.coverage,
            "local_nodes": graph.num_nodes,
            "local_edges": graph.block.num_edges,
            "halo_nodes": data.halo_nodes,
            "halo_reused": halo.reuse_dst.numel(),
            "halo_hits": data.halo_hits,
            "halo_misses": data.halo_misses,
            "halo_hit_rate": data.halo_hits / max(data.halo_hits + data.halo_misses, 1),
            "halo_bytes": plan.halo_bytes if first else 0,
            "halo_time_s": plan.halo_time_s if first else 0.0,
            "switch_time_s": plan.stall_s if first else 0.0,
        }
        total = sum(plan.counts)
        count = len(rows) if self.local else plan.global_counts[j]
        return Step(
            epoch=plan.epoch,
            x=nodes.x,
            enc=nodes.enc,
            attention=self.attention,
            node_ids=nodes.node_ids,
            loss_rows=rows,
            labels=nodes.y[rows],
            weights=data.row_weights[rows],
            global_count=max(count, 1),
            dropout_step=dropout_step,
            reduce=False,
            fields=fields,
            ends_epoch=last,
            local=self.local,
            sync=self.local and plan.boundary and last,
            sync_weight=plan.counts[self.pg.rank] / total if total else 1.0 / len(plan.counts),
            input_bytes=plan.halo_bytes if first else 0,
        )

    def eval_batch(self):
        if self.from_store:
            raise ValueError(
                "mode 'isolated' from a partition store evaluates one chunk pair at a time (eval_batches); "
                "a whole-graph forward needs mode 'full' on a store with one part per rank"
            )
        return self.eval_ranks.eval_batch()

    def eval_batches(self):
        """From a store: one batch per pair of super-epoch 0 this rank holds, loaded in turn (the
        same pairs at every evaluation, every node in exactly one of them over the ranks)."""
        if not self.from_store:
            yield self.eval_batch()
            return
        for i in range(len(self.loader.pairs(0))):
            yield self._pair_batch(self.loader.load(0, i))  # held by no local here while the next one loads

    def _pair_batch(self, data: SuperEpochData) -> EvalBatch:
        nodes = data.graph.nodes
        return EvalBatch(
            x=nodes.x,
            attention=local_attention(data.graph, self.cfg.backend),
            node_ids=nodes.node_ids,
            y=nodes.y,
            masks=(nodes.train_mask, nodes.val_mask, nodes.test_mask),
        )

    def close(self):
        if getattr(self, "chunks", None) is not None:
            self.chunks.close()
