"""Isolated (Grappa-style) training, strategy 'isolated': every rank trains on its own chunks'
induced subgraph with one-rank attention, so a training step moves no activations; the only
traffic is DeepSpeed's gradient reduction. The neighbour chunk rotates every ``repart_every``
epochs (a super-epoch; see ``dsgraph.parallel.isolated``), loaded ahead by a background thread.

The loss on rank r is ``sum_i w_i * loss_i * W / global_count`` over its primary training nodes,
with ``w`` the coverage correction, so DeepSpeed's average over W ranks is the weighted mean over
all training nodes. Evaluation is the normal full-graph path (strategy 'ag' over all ranks), so
accuracy compares directly with the other strategies.

A step row's ``loss`` and ``train_acc`` cover rank 0's primary training nodes only (a global
value would need a collective in the step); evaluation rows are global as usual.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time

import deepspeed.comm as dist
import torch
import torch.nn.functional as F

from dsgraph.graph import load_dataset
from dsgraph.parallel.isolated import RotationSchedule, assign_chunks, default_num_chunks, super_epoch_of
from dsgraph.train.chunk_store import ChunkLoader, ChunkPrefetcher, SuperEpochData, write_chunk_store
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.graph_source import raise_if_any_rank_failed
from dsgraph.train.trainer import Trainer


class IsolatedTrainer(Trainer):
    """``Trainer`` with isolated training steps; evaluation, checkpoints, resume and ``fit`` are
    inherited. ``switch_times`` lists (super-epoch, stall seconds, load seconds) of every switch."""

    def __init__(self, cfg: DsgraphConfig, ds_config: dict, device: torch.device, log=print, heartbeat=None):
        if cfg.strategy != "isolated":
            raise ValueError(f"IsolatedTrainer runs strategy 'isolated', not '{cfg.strategy}'")
        world = dist.get_world_size() if dist.is_initialized() else 1
        schedule = RotationSchedule(default_num_chunks(cfg.isolated_chunks, world), world)  # checked before any set-up
        super().__init__(dataclasses.replace(cfg, strategy="ag"), ds_config, device, log, heartbeat)
        self.cfg, self.schedule = cfg, schedule
        self.heartbeat("writing the chunk store")
        store_dir = self._write_store()
        dtype = torch.bfloat16 if self.engine.bfloat16_enabled() else torch.float32
        loader = ChunkLoader(store_dir, self.schedule, self.pg.rank, correction=cfg.isolated_correction,
                             layers=cfg.layers, heads=cfg.heads, backend=cfg.backend, device=device, dtype=dtype)  # fmt: skip
        self.chunks = ChunkPrefetcher(loader, cfg.isolated_prefetch)
        self.data: SuperEpochData | None = None
        self.switch_times: list[tuple[int, float, float]] = []
        if self.pg.rank == 0:
            s = self.schedule
            log(f"isolated: {s.num_chunks} {cfg.chunk_method} chunks, {s.chunks_per_rank} primary per rank, "
                f"neighbour rotates every {cfg.repart_every} epochs (cycle {s.cycle_length} super-epochs), "
                f"correction '{cfg.isolated_correction}', prefetch {'on' if cfg.isolated_prefetch else 'off'}, "
                f"store {store_dir}")  # fmt: skip

    def _write_store(self) -> str:
        """Rank 0 chooses the chunks; with ``isolated_store`` rank 0 writes the store there, otherwise
        every rank writes its own copy in a temporary folder (removed at exit)."""
        cfg, rank = self.cfg, self.pg.rank
        graph = load_dataset(cfg.dataset, seed=cfg.seed)
        if cfg.self_loops:
            graph = graph.with_self_loops()
        num_chunks = self.schedule.num_chunks
        chunk_of = assign_chunks(graph, num_chunks, cfg.chunk_method, cfg.seed) if rank == 0 else None
        chunk_of = self.control.bcast(chunk_of, root=0)
        if cfg.isolated_store is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"dsgraph-chunks-r{rank}-")
            store_dir, writer = os.path.join(self._tmp.name, "store"), True
        else:
            store_dir, writer = cfg.isolated_store, rank == 0
        error = None
        if writer:
            try:
                write_chunk_store(graph, chunk_of, num_chunks, store_dir, method=cfg.chunk_method, seed=cfg.seed, dataset=cfg.dataset)
            except (ValueError, OSError) as err:
                error = ValueError(f"writing the chunk store {store_dir} failed: {err}")
        raise_if_any_rank_failed(self.control, error)  # also makes the other ranks wait for rank 0's store
        return store_dir

    def _switch(self, super_epoch: int) -> float:
        """Makes ``super_epoch``'s data current and starts loading the next one; returns the stall."""
        self.data, stall = self.chunks.get(super_epoch)
        self.switch_times.append((super_epoch, stall, self.data.load_time_s))
        if (super_epoch + 1) * self.cfg.repart_every < self.cfg.epochs:
            self.chunks.prefetch(super_epoch + 1)
        return stall

    def train_step(self, epoch: int) -> dict:
        super_epoch = super_epoch_of(epoch, self.cfg.repart_every)
        stall = self._switch(super_epoch) if self.data is None or self.data.super_epoch != super_epoch else 0.0
        data, engine = self.data, self.engine
        engine.train()
        self.pg.stats.reset()
        start = time.perf_counter()
        logits = engine(data.x, data.attention, data.node_ids, epoch)
        train_logits, train_y = logits[data.loss_mask].float(), data.y[data.loss_mask]
        losses = F.cross_entropy(train_logits, train_y, reduction="none")  # [m]
        engine.backward((losses * data.weights).sum() * self.world / self.train_count)
        engine.step()
        step_time = time.perf_counter() - start
        count = max(int(losses.numel()), 1)
        return {
            "kind": "step",
            "epoch": epoch,
            "step": engine.global_steps,
            "loss": float(losses.detach().sum()) / count,
            "train_acc": float((train_logits.argmax(1) == train_y).sum()) / count,
            "val_acc": None,
            "test_acc": None,
            **self._system(step_time),
            "super_epoch": super_epoch,
            "chunks": list(data.chunks),
            "coverage": data.coverage,
            "local_nodes": data.num_nodes,
            "local_edges": data.num_edges,
            "switch_time_s": stall,
        }

    def fit(self, log=print) -> dict:
        try:
            return super().fit(log)
        finally:
            self.chunks.close()
