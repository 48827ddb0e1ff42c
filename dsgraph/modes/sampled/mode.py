"""Sampled mini-batch training (mode 'sampled') on the same model, kernels and DeepSpeed engine.

Ranks are data-parallel over seed nodes: every epoch the training nodes are shuffled (keyed by seed
and epoch) and cut into global batches of ``batch_size``; each rank takes its share of a batch,
samples its L-hop subgraph (``dsgraph.modes.sampled``), and runs the unchanged Graph Transformer on that
compact graph, held whole by the rank (no graph-parallel traffic). The loss is taken on the seed
rows as ``local_sum * W / global_batch``, so DeepSpeed's gradient averaging over W ranks gives the
mean over the global batch. A background thread prepares batches (sampling and feature gathering)
up to ``prefetch_depth`` ahead; features come from a store in fp32 or bf16 with a hot-node cache.

Global attention (model option ``global_attention``) spans the global batch's seed nodes: each rank
sums over its seeds and the sums are all-reduced, so 1 and P ranks take the same steps; every node
of a rank's subgraph attends to them. Evaluation runs it over all nodes.

Evaluation runs the model on the whole graph on every rank (all ranks must run the forward under
ZeRO-3), so it needs the graph to fit one rank, as Cora and rmat graphs up to a few million edges do.
With edge features, a batch's edges take theirs by the whole graph's edge ids the sampler reports.

With ``partitions`` (a store with one part per rank) nothing is loaded whole: each rank maps its own
part, the owners of a batch's rows draw their neighbours and send their features over all_to_all
(``remote.py``), so the batches are the whole-graph run's, and evaluation runs in sampled chunks of
each rank's own rows (``store_batches.py``). The model then reads node features only.
"""

from __future__ import annotations

import numpy as np
import torch

from dsgraph.comm import GlobalNodes
from dsgraph.graph import encodings, load_dataset
from dsgraph.graph.rank_graph import Csr, EdgeData, NodeData, RankGraph, whole_graph
from dsgraph.modes.base import EvalBatch, Mode, Step
from dsgraph.modes.ranks import check_store_features, edge_features, local_attention
from dsgraph.modes.sampled import (
    FEATURE_DTYPES,
    BatchBuilder,
    FeatureStore,
    MiniBatch,
    NeighborSampler,
    Prefetcher,
    epoch_batches,
    sampling_frequency_scores,
)
from dsgraph.modes.sampled.batch_memory import alternatives as batch_alternatives
from dsgraph.modes.sampled.batch_memory import predict_sampled
from dsgraph.modes.sampled.config import SampledConfig
from dsgraph.modes.sampled.exchange import Exchange
from dsgraph.modes.sampled.remote import RemoteSampler
from dsgraph.modes.sampled.store_batches import StoreBatchBuilder
from dsgraph.modes.sampled.store_source import StoreView


def batch_edges(sub, edge_attr: torch.Tensor | None) -> EdgeData | None:
    """The features of a sampled subgraph's edges (added self loops: zero rows, marked)."""
    if edge_attr is None:
        return None
    added = sub.edge_ids < 0
    return EdgeData(attr=edge_attr[sub.edge_ids.clamp_min(0)] * ~added[:, None], added_loop=added)


def batch_graph(
    batch: MiniBatch, num_features: int, num_classes: int, edge_attr: torch.Tensor | None = None
) -> RankGraph:
    """A mini-batch as a rank graph: its compact subgraph, with the seeds' labels (seeds first, the
    other rows unlabelled: -1, or NaN for a multi-label target), the seeds as the training rows and,
    given the whole graph's ``edge_attr``, its edges' features."""
    sub = batch.graph
    n, seeds = sub.num_nodes, sub.num_seeds
    y = torch.full((n, *batch.y.shape[1:]), float("nan") if batch.y.is_floating_point() else -1, dtype=batch.y.dtype)
    y[:seeds] = batch.y
    train = torch.zeros(n, dtype=torch.bool)
    train[:seeds] = True
    none = torch.zeros(n, dtype=torch.bool)
    nodes = NodeData(
        node_ids=sub.node_ids, x=batch.x, y=y, train_mask=train, val_mask=none, test_mask=none, enc=batch.enc
    )
    csr = Csr(sub.rowptr, sub.col)
    return RankGraph(
        num_nodes=n,
        block=csr,
        whole=csr,
        nodes=nodes,
        num_features=num_features,
        num_classes=num_classes,
        edges=batch_edges(sub, edge_attr),
    )


class Sampled(Mode):
    """One epoch is a pass over the training nodes in global batches."""

    name = "sampled"
    section, Config = "sampled", SampledConfig
    uses_strategy = False  # batches and evaluation run the plain op on a graph this rank holds whole

    @classmethod
    def check_config(cls, cfg) -> None:
        cfg.sampled.check_run(layers=cfg.layers)
        check_store_features(cfg, "sampled")

    @classmethod
    def predict_memory(cls, cfg, dtype_bytes, world_size):
        return predict_sampled(cfg, dtype_bytes, world_size)

    @classmethod
    def memory_alternatives(cls, cfg, predicted, dtype_bytes, world_size, limit_mb):
        return batch_alternatives(cfg, predicted, world_size, limit_mb)

    def __init__(self, cfg, pg, control, log, heartbeat, task=None):
        """``task`` is not read: the sampled mode trains node tasks (the others refuse it in their checks)."""
        self.cfg, self.pg, self.log = cfg, pg, log
        self.view = None
        if cfg.partitions is not None:
            self._open_store(control, heartbeat)
        else:
            self._load_whole(heartbeat)
        if self.train_ids.size == 0:
            raise ValueError(f"dataset '{cfg.dataset}' has no training nodes (train_mask is empty)")
        self.batches_per_epoch = len(epoch_batches(self.train_ids, cfg.sampled.batch_size, cfg.seed, 0, pg.world_size))

    def _load_whole(self, heartbeat) -> None:
        cfg = self.cfg
        heartbeat("start-up: loading the graph")
        graph = edge_features(
            load_dataset(cfg.dataset, seed=cfg.seed, choice=cfg.split_choice()), cfg.model.reads_edges, cfg.dataset
        )
        graph = encodings.select(graph, encodings.arrays_of(cfg.model.encodings), cfg.dataset, cfg.seed)
        self.encoding_widths = encodings.widths(graph.enc)
        self.multilabel = graph.multilabel
        self.num_features, self.num_classes, self.num_edge_features = (
            graph.num_features,
            graph.num_classes,
            graph.num_edge_features,
        )
        self.train_ids = graph.train_mask.nonzero().squeeze(1).numpy()
        self.graph = graph

    def _open_store(self, control, heartbeat) -> None:
        """This rank's part of the store memory-mapped, every rank's training ids, and the
        exchanges of the prefetch thread (training) and of the main thread (evaluation)."""
        cfg, pg = self.cfg, self.pg
        heartbeat("start-up: opening the partition store")
        self.view = StoreView(cfg.partitions, pg.rank, pg.world_size, control)
        self.num_features, self.num_classes = self.view.num_features, self.view.num_classes
        self.train_ids, self.train_new = self.view.train_ids(control)
        self.eval_chunks = self.view.eval_chunks(-(-cfg.sampled.batch_size // pg.world_size), control)
        self.exchanges = [Exchange(pg.rank, pg.world_size, cfg.timeout_s) for _ in ("train", "eval")]

    def attach(self, device, dtype):
        self.device, self.dtype = device, dtype
        self.predicted_mb = None  # a CPU rank's predicted peak, from a store only (``batch_memory.py``)
        if self.view is not None and device.type == "cpu":
            self.predicted_mb = round(predict_sampled(self.cfg, dtype.itemsize, self.pg.world_size).total_mb, 1)
        if self.view is not None:
            self._attach_store()
            return
        cfg, graph = self.cfg, self.graph
        hot = (
            sampling_frequency_scores(graph.rowptr, graph.col, cfg.sampled.fanouts[-1])
            if cfg.sampled.cache_fraction
            else None
        )
        self.store = FeatureStore(
            graph.x,
            dtype=FEATURE_DTYPES[cfg.sampled.feature_dtype],
            cache_fraction=cfg.sampled.cache_fraction,
            hot_scores=hot,
            device=device,
        )
        sampler = NeighborSampler(graph.rowptr, graph.col, cfg.sampled.fanouts, self_loops=cfg.adds_self_loops)
        self.builder = BatchBuilder(sampler, self.store, graph.y, cfg.seed, enc=graph.enc)
        self.eval_source = graph.with_self_loops() if cfg.adds_self_loops else graph
        self.edge_attr = graph.edge_attr
        self.graph = None
        self.log(
            f"sampled: fanouts {cfg.sampled.fanouts}, batch {cfg.sampled.batch_size} over {self.pg.world_size} "
            "rank(s), "
            f"{self.batches_per_epoch} steps/epoch, prefetch depth {cfg.sampled.prefetch_depth}; features "
            f"{self.store.table_bytes / 2**20:.1f} MB ({cfg.sampled.feature_dtype}), cache "
            f"{self.store.cached_ids.numel()} "
            f"nodes ({self.store.cache_bytes / 2**20:.1f} MB)"
        )

    def _attach_store(self) -> None:
        cfg = self.cfg
        dtype = FEATURE_DTYPES[cfg.sampled.feature_dtype]
        sampler = RemoteSampler(self.view, self.exchanges[0], cfg.sampled.fanouts, self_loops=cfg.adds_self_loops)
        self.builder = StoreBatchBuilder(sampler, self.train_ids, self.train_new, cfg.seed, dtype, self.device)
        self.eval_builder = StoreBatchBuilder(
            RemoteSampler(self.view, self.exchanges[1], cfg.sampled.fanouts, self_loops=cfg.adds_self_loops),
            self.train_ids,
            self.train_new,
            cfg.seed,
            dtype,
            self.device,
        )
        self.edge_attr = None
        part = self.view.part
        self.log(
            f"sampled from partition store {cfg.partitions}: part {self.pg.rank} of {self.pg.world_size} "
            f"(rows {part.start}..{part.end}, {part.num_local_edges} in-edges, memory-mapped); fanouts "
            f"{cfg.sampled.fanouts}, batch {cfg.sampled.batch_size}, {self.batches_per_epoch} steps/epoch, prefetch "
            f"depth {cfg.sampled.prefetch_depth}; neighbours drawn and features ({cfg.sampled.feature_dtype}) "
            f"fetched from their owners' parts (no feature cache); evaluation in {len(self.eval_chunks)} chunk(s)"
        )

    def prepare(self, epoch: int, index: int) -> MiniBatch:
        """Batch ``index`` of ``epoch`` for this rank."""
        batches = epoch_batches(self.train_ids, self.cfg.sampled.batch_size, self.cfg.seed, epoch, self.pg.world_size)
        return self.builder.build(epoch, index, batches[index], self.pg.rank, self.pg.world_size)

    def steps(self, start_epoch, end_epoch=None):
        """One prefetcher feeds every step from ``start_epoch`` on, so the queue keeps filling across
        epoch ends, evaluations and checkpoints."""
        end = self.cfg.epochs if end_epoch is None else end_epoch
        nb = self.batches_per_epoch
        produce = lambda i: self.prepare(start_epoch + i // nb, i % nb)  # noqa: E731
        count, depth = (end - start_epoch) * nb, self.cfg.sampled.prefetch_depth
        # from a store a batch joins exchanges: a loop ended early (early stop) must not leave one half-joined
        with Prefetcher(produce, count, depth, finish_on_close=self.view is not None) as batches:
            for batch in batches:
                yield self._step(batch, batches.last_wait)

    def _step(self, batch: MiniBatch, queue_wait_s: float) -> Step:
        graph = batch_graph(batch, self.num_features, self.num_classes, self.edge_attr).to(self.device, self.dtype)
        nodes, sub = graph.nodes, batch.graph
        seeds = GlobalNodes(self.pg, rows=slice(0, sub.num_seeds))  # global attention: the global batch's seeds
        return Step(
            epoch=batch.epoch,
            x=nodes.x,
            attention=local_attention(graph, self.cfg.backend, seeds),
            node_ids=nodes.node_ids,
            loss_rows=nodes.train_mask,
            labels=nodes.y[nodes.train_mask],
            global_count=batch.global_count,
            summed={
                "sampled_nodes_before_dedup": sub.nodes_before_dedup,
                "sampled_nodes_after_dedup": sub.num_nodes,
                "sampled_edges": sub.num_edges,
                "cache_hits": batch.cache_hits,
                "queue_wait_s": queue_wait_s,
                "prepare_time_s": batch.sample_time_s + batch.gather_time_s,
            },
            fields={"batch": batch.index},
            ends_epoch=batch.index + 1 == self.batches_per_epoch,
            enc=nodes.enc,
        )

    def step_fields(self, step, summed):
        world = self.pg.world_size
        predicted = {} if self.predicted_mb is None else {"predicted_peak_mem_mb": self.predicted_mb}
        return predicted | {
            "sampled_nodes_before_dedup": int(summed["sampled_nodes_before_dedup"]),
            "sampled_nodes_after_dedup": int(summed["sampled_nodes_after_dedup"]),
            "sampled_edges": int(summed["sampled_edges"]),
            "cache_hit_rate": summed["cache_hits"] / max(summed["sampled_nodes_after_dedup"], 1.0),
            "queue_wait_s": summed["queue_wait_s"] / world,
            "prepare_time_s": summed["prepare_time_s"] / world,
        }

    def eval_batches(self):
        """From a store: one forward per chunk of this rank's rows in a split (``store_batches.py``),
        the counts summed over the ranks; otherwise the whole graph (``eval_batch``)."""
        if self.view is None:
            yield self.eval_batch()
            return
        part = self.view.part
        fallback = part.start if part.end > part.start else 0
        for chunk in self.eval_chunks:
            sub, x, y, masks = self.eval_builder.eval_chunk(chunk, fallback)
            yield self._store_eval_batch(sub, x, y, masks, sub.num_seeds if chunk.size else 0)

    def _store_eval_batch(self, sub, x, y, masks, seeds: int) -> EvalBatch:
        """A chunk's forward; global attention spans the chunk's seeds over all ranks, as a training
        step's spans the global batch's."""
        csr = Csr(sub.rowptr, sub.col)
        nodes = NodeData(node_ids=sub.node_ids, x=x, y=y, train_mask=masks[0], val_mask=masks[1], test_mask=masks[2])
        graph = RankGraph(
            num_nodes=sub.num_nodes,
            block=csr,
            whole=csr,
            nodes=nodes,
            num_features=self.num_features,
            num_classes=self.num_classes,
        ).to(self.device, self.dtype)
        nodes = graph.nodes
        return EvalBatch(
            x=nodes.x,
            attention=local_attention(graph, self.cfg.backend, GlobalNodes(self.pg, rows=slice(0, seeds))),
            node_ids=nodes.node_ids,
            y=nodes.y,
            masks=(nodes.train_mask, nodes.val_mask, nodes.test_mask),
            reduce=True,
        )

    def eval_batch(self):
        """The whole graph on every rank (so every rank counts every node: no reduction), moved to
        the device for this evaluation only."""
        if self.view is not None:
            raise ValueError(
                "mode 'sampled' from a partition store evaluates in chunks (eval_batches); a whole-graph forward "
                "needs the dataset loaded whole: drop 'partitions'"
            )
        graph = whole_graph(self.eval_source, edge_features=self.edge_attr is not None).to(self.device, self.dtype)
        nodes = graph.nodes
        return EvalBatch(
            x=nodes.x,
            attention=local_attention(graph, self.cfg.backend),
            node_ids=nodes.node_ids,
            y=nodes.y,
            masks=(nodes.train_mask, nodes.val_mask, nodes.test_mask),
            reduce=False,
            enc=nodes.enc,
        )

    def epoch_line(self, epoch, rows):
        mean = lambda key: float(np.mean([r[key] for r in rows]))  # noqa: E731
        dedup = 1.0 - mean("sampled_nodes_after_dedup") / max(mean("sampled_nodes_before_dedup"), 1.0)
        return (
            f"epoch {epoch:4d}  loss {mean('loss'):.4f}  train_acc {mean('train_acc'):.3f}  steps {len(rows)}  "
            f"step {mean('step_time_s') * 1e3:.0f} ms  wait {mean('queue_wait_s') * 1e3:.1f} ms  "
            f"nodes {mean('sampled_nodes_after_dedup'):.0f} (dedup -{100 * dedup:.0f}%)  "
            f"cache hit {100 * mean('cache_hit_rate'):.0f}%"
        )

    def step_time_note(self, rows):
        return ""
