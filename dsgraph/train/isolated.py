"""Isolated (Grappa-style) training, mode 'isolated': every rank trains on its own chunks' induced
subgraph with one-rank attention, so a training step moves no activations; the only traffic is
DeepSpeed's gradient reduction. The neighbour chunk rotates every ``repart_every`` epochs (a
super-epoch; see ``dsgraph.parallel.isolated``), loaded ahead by a background thread.

The loss on rank r is ``sum_i w_i * loss_i * W / global_count`` over its primary training nodes,
with ``w`` the coverage correction, so DeepSpeed's average over W ranks is the weighted mean over
all training nodes. Evaluation is the normal full-graph path (the configured strategy over all
ranks, on the same loaded dataset), so accuracy compares directly with the other modes.

A step row's ``loss`` and ``train_acc`` cover this rank's primary training nodes only (a global
value would need a collective in the step); evaluation rows are global as usual.
"""

from __future__ import annotations

import os
import tempfile

import torch

from dsgraph.graph import load_dataset
from dsgraph.parallel.isolated import RotationSchedule, assign_chunks, default_num_chunks, super_epoch_of
from dsgraph.train.chunk_store import ChunkLoader, ChunkPrefetcher, SuperEpochData, write_chunk_store
from dsgraph.train.full_graph import GraphOnRanks
from dsgraph.train.graph_source import raise_if_any_rank_failed
from dsgraph.train.mode import Mode, Step
from dsgraph.train.sampled import local_attention


class Isolated(Mode):
    """``switch_times`` lists (super-epoch, stall seconds, load seconds) of every switch."""

    name = "isolated"

    def __init__(self, cfg, pg, control, log, heartbeat):
        self.cfg, self.control, self.heartbeat = cfg, control, heartbeat
        self.schedule = RotationSchedule(default_num_chunks(cfg.isolated_chunks, pg.world_size), pg.world_size)
        heartbeat("start-up: loading the graph")
        graph = load_dataset(cfg.dataset, seed=cfg.seed)
        graph = graph.with_self_loops() if cfg.self_loops else graph
        self.eval_ranks = GraphOnRanks(cfg, pg, control, log, graph=graph)  # full-graph evaluation, same data
        self.pg = self.eval_ranks.pg
        self.num_features, self.num_classes = graph.num_features, graph.num_classes
        heartbeat("start-up: writing the chunk store")
        self.store_dir = self._write_store(graph)
        self.data: SuperEpochData | None = None
        self.switch_times: list[tuple[int, float, float]] = []
        s = self.schedule
        log(f"isolated: {s.num_chunks} {cfg.chunk_method} chunks, {s.chunks_per_rank} primary per rank, "
            f"neighbour rotates every {cfg.repart_every} epochs (cycle {s.cycle_length} super-epochs), "
            f"correction '{cfg.isolated_correction}', prefetch {'on' if cfg.isolated_prefetch else 'off'}, "
            f"store {self.store_dir}")  # fmt: skip

    def _write_store(self, graph) -> str:
        """Rank 0 chooses the chunks; with ``isolated_store`` rank 0 writes the store there, otherwise
        every rank writes its own copy in a temporary folder (removed at exit)."""
        cfg, rank = self.cfg, self.pg.rank
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

    def attach(self, device, dtype):
        cfg = self.cfg
        self.eval_ranks.attach(device, dtype)
        loader = ChunkLoader(self.store_dir, self.schedule, self.pg.rank, correction=cfg.isolated_correction,
                             layers=cfg.layers, device=device, dtype=dtype)  # fmt: skip
        self.chunks = ChunkPrefetcher(loader, cfg.isolated_prefetch)

    def _switch(self, super_epoch: int) -> float:
        """Makes ``super_epoch``'s data current and starts loading the next one; returns the stall."""
        self.data, stall = self.chunks.get(super_epoch)
        self.switch_times.append((super_epoch, stall, self.data.load_time_s))
        if (super_epoch + 1) * self.cfg.repart_every < self.cfg.epochs:
            self.chunks.prefetch(super_epoch + 1)
        return stall

    def steps(self, start_epoch, end_epoch=None):
        for epoch in range(start_epoch, self.cfg.epochs if end_epoch is None else end_epoch):
            yield self.step(epoch)

    def step(self, epoch: int) -> Step:
        super_epoch = super_epoch_of(epoch, self.cfg.repart_every)
        stall = self._switch(super_epoch) if self.data is None or self.data.super_epoch != super_epoch else 0.0
        data = self.data
        graph, nodes = data.graph, data.graph.nodes
        fields = {"super_epoch": super_epoch, "chunks": list(data.chunks), "coverage": data.coverage,
                  "local_nodes": graph.num_nodes, "local_edges": graph.block.num_edges, "switch_time_s": stall}  # fmt: skip
        return Step(epoch=epoch, x=nodes.x, attention=local_attention(graph, self.cfg.backend), node_ids=nodes.node_ids,
                    loss_rows=nodes.train_mask, labels=nodes.y[nodes.train_mask], weights=data.weights,
                    global_count=self.eval_ranks.train_count, dropout_step=epoch, reduce=False, fields=fields)  # fmt: skip

    def eval_batch(self):
        return self.eval_ranks.eval_batch()

    def close(self):
        if getattr(self, "chunks", None) is not None:
            self.chunks.close()
