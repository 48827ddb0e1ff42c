"""Sampled mini-batch training (strategy 'sampled') on the same model, kernels and DeepSpeed engine.

Ranks are data-parallel over seed nodes: every epoch the training nodes are shuffled (keyed by seed
and epoch) and cut into global batches of ``batch_size``; each rank takes its share of a batch,
samples its L-hop subgraph (``dsgraph.sampling``), and runs the unchanged Graph Transformer on that
compact graph, with attention on one rank (no graph-parallel traffic). The loss is taken on the seed
rows as ``local_sum * W / global_batch``, so DeepSpeed's gradient averaging over W ranks gives the
mean over the global batch. A background thread prepares batches (sampling and feature gathering)
up to ``prefetch_depth`` ahead; features come from a store in fp32 or bf16 with a hot-node cache.

Evaluation runs the model on the whole graph on every rank (all ranks must run the forward under
ZeRO-3), so it needs the graph to fit one rank, as Cora and rmat graphs up to a few million edges do.
"""

from __future__ import annotations

import time

import deepspeed
import deepspeed.comm as dist
import numpy as np
import torch
import torch.nn.functional as F

from dsgraph.graph import load_dataset
from dsgraph.ops import sparse_attention
from dsgraph.sampling import (
    FEATURE_DTYPES, BatchBuilder, FeatureStore, MiniBatch, NeighborSampler, Prefetcher, epoch_batches,
    sampling_frequency_scores,
)  # fmt: skip
from dsgraph.train import checkpoint
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.metrics import MetricsWriter, peak_memory_mb
from dsgraph.train.trainer import _all_reduce_sum, build_model


class SubgraphAttention:
    """Attention over one graph held whole on this rank: ``(q, k, v) -> y`` on its rows, [n, H, D]."""

    def __init__(self, rowptr: torch.Tensor, col: torch.Tensor, backend: str = "auto"):
        self.rowptr, self.col, self.backend = rowptr, col, backend

    def __call__(self, q_nHD: torch.Tensor, k_nHD: torch.Tensor, v_nHD: torch.Tensor) -> torch.Tensor:
        return sparse_attention(self.rowptr, self.col, q_nHD, k_nHD, v_nHD, backend=self.backend)


class SampledTrainer:
    """The mini-batch counterpart of ``Trainer``: same constructor, ``train_step``, ``evaluate``,
    ``resume`` and ``fit``; each epoch is one pass over the training nodes."""

    def __init__(self, cfg: DsgraphConfig, ds_config: dict, device: torch.device, log=print, heartbeat=None):
        """``heartbeat(phase)`` is called at every phase of set-up and at every step (the entry point's
        watchdog); ``log`` prints rank 0's set-up summary."""
        if cfg.strategy != "sampled":
            raise ValueError(f"SampledTrainer runs strategy 'sampled', not '{cfg.strategy}'")
        self.cfg, self.device = cfg, device
        self.heartbeat = heartbeat or (lambda what: None)
        self.heartbeat("loading the graph")
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        graph = load_dataset(cfg.dataset, seed=cfg.seed)
        self.num_classes = graph.num_classes
        self.train_ids = graph.train_mask.nonzero().squeeze(1).numpy()
        if self.train_ids.size == 0:
            raise ValueError(f"dataset '{cfg.dataset}' has no training nodes (train_mask is empty)")
        self.batches_per_epoch = len(epoch_batches(self.train_ids, cfg.batch_size, cfg.seed, 0, self.world))
        hot = sampling_frequency_scores(graph.rowptr, graph.col, cfg.fanouts[-1]) if cfg.cache_fraction else None
        self.store = FeatureStore(
            graph.x, dtype=FEATURE_DTYPES[cfg.feature_dtype], cache_fraction=cfg.cache_fraction, hot_scores=hot, device=device
        )
        sampler = NeighborSampler(graph.rowptr, graph.col, cfg.fanouts, self_loops=cfg.self_loops)
        self.builder = BatchBuilder(sampler, self.store, graph.y, cfg.seed)
        model = build_model(cfg, graph.num_features, self.num_classes)
        self.heartbeat("deepspeed.initialize")
        self.engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
        self.dtype = torch.bfloat16 if self.engine.bfloat16_enabled() else torch.float32
        full = graph.with_self_loops() if cfg.self_loops else graph
        self.eval_attention = SubgraphAttention(full.rowptr.to(device), full.col.to(device), cfg.backend)
        self.eval_y = full.y.to(device)
        self.eval_masks = [m.to(device) for m in (full.train_mask, full.val_mask, full.test_mask)]
        self.start_epoch = 0
        self.best = {"val_acc": -1.0, "test_acc": 0.0, "epoch": -1}
        if self.rank == 0:
            log(
                f"sampled: fanouts {cfg.fanouts}, batch {cfg.batch_size} over {self.world} rank(s), "
                f"{self.batches_per_epoch} steps/epoch, prefetch depth {cfg.prefetch_depth}; features "
                f"{self.store.table_bytes / 2**20:.1f} MB ({cfg.feature_dtype}), cache {self.store.cached_ids.numel()} "
                f"nodes ({self.store.cache_bytes / 2**20:.1f} MB)"
            )

    # --- one optimizer step on one mini-batch ---------------------------------------------------
    def prepare(self, index: int) -> MiniBatch:
        """The ``index``-th mini-batch of this run (counted from ``start_epoch``), for this rank."""
        epoch, i = divmod(index, self.batches_per_epoch)
        epoch += self.start_epoch
        batches = epoch_batches(self.train_ids, self.cfg.batch_size, self.cfg.seed, epoch, self.world)
        return self.builder.build(epoch, i, batches[i], self.rank, self.world)

    def train_step(self, batch: MiniBatch, queue_wait_s: float = 0.0) -> dict:
        engine, sub = self.engine, batch.graph
        engine.train()
        start = time.perf_counter()
        attention = SubgraphAttention(sub.rowptr.to(self.device), sub.col.to(self.device), self.cfg.backend)
        node_ids = sub.node_ids.to(self.device)
        logits = engine(batch.x.to(self.dtype), attention, node_ids, engine.global_steps)
        seed_logits = logits[: sub.num_seeds].float()
        local_sum = F.cross_entropy(seed_logits, batch.y, reduction="sum")
        engine.backward(local_sum * self.world / batch.global_size)
        engine.step()
        step_time = time.perf_counter() - start
        correct = float((seed_logits.argmax(1) == batch.y).sum())
        totals = _all_reduce_sum(
            [float(local_sum.detach()), correct, sub.nodes_before_dedup, sub.num_nodes, sub.num_edges,
             batch.cache_hits, queue_wait_s, batch.sample_time_s + batch.gather_time_s],
            self.device,
        )  # fmt: skip
        return {
            "kind": "step",
            "epoch": batch.epoch,
            "step": engine.global_steps,
            "batch": batch.index,
            "loss": totals[0] / batch.global_size,
            "train_acc": totals[1] / batch.global_size,
            "val_acc": None,
            "test_acc": None,
            "strategy": "sampled",
            "world_size": self.world,
            "step_time_s": step_time,
            "comm_time_s": 0.0,  # no graph-parallel traffic; DeepSpeed's gradient all-reduce is inside step_time_s
            "comm_bytes": 0,
            "peak_mem_mb": peak_memory_mb(self.device),
            "sampled_nodes_before_dedup": int(totals[2]),
            "sampled_nodes_after_dedup": int(totals[3]),
            "sampled_edges": int(totals[4]),
            "cache_hit_rate": totals[5] / max(totals[3], 1.0),
            "queue_wait_s": totals[6] / self.world,
            "prepare_time_s": totals[7] / self.world,
        }

    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict:
        """Accuracy on the whole graph (every rank runs the same forward)."""
        engine = self.engine
        engine.eval()
        start = time.perf_counter()
        x = self.store.x.to(self.device, self.dtype)
        node_ids = torch.arange(x.shape[0], device=self.device)
        logits = engine(x, self.eval_attention, node_ids, engine.global_steps).float()
        eval_time = time.perf_counter() - start
        pred = logits.argmax(1)
        acc = [float((pred[m] == self.eval_y[m]).float().mean()) if bool(m.any()) else 0.0 for m in self.eval_masks]
        train = self.eval_masks[0]
        if acc[1] > self.best["val_acc"]:
            self.best = {"val_acc": acc[1], "test_acc": acc[2], "epoch": epoch}
        return {
            "kind": "eval",
            "epoch": epoch,
            "step": engine.global_steps,
            "loss": float(F.cross_entropy(logits[train], self.eval_y[train])),
            "train_acc": acc[0],
            "val_acc": acc[1],
            "test_acc": acc[2],
            "strategy": "sampled",
            "world_size": self.world,
            "step_time_s": eval_time,
            "comm_time_s": 0.0,
            "comm_bytes": 0,
            "peak_mem_mb": peak_memory_mb(self.device),
            "best_val_acc": self.best["val_acc"],
            "test_acc_at_best_val": self.best["test_acc"],
        }

    # --- the loop ---------------------------------------------------------------------------
    def resume(self) -> None:
        self.heartbeat("loading the latest checkpoint")
        state = checkpoint.load_latest(self.engine, self.cfg.checkpoint_dir, self.cfg.seed)
        self.start_epoch, self.best = state["epoch"] + 1, state["best"]

    def fit(self, log=print) -> dict:
        """Trains from ``start_epoch`` to ``cfg.epochs``; one prefetcher feeds every step of the run,
        so the queue keeps filling across epoch ends, evaluations and checkpoints."""
        cfg, nb = self.cfg, self.batches_per_epoch
        metrics = MetricsWriter(cfg.metrics_out, self.engine.monitor, self.rank, append=self.start_epoch > 0)
        last, rows = None, []
        total = (cfg.epochs - self.start_epoch) * nb
        try:
            with Prefetcher(self.prepare, total, cfg.prefetch_depth) as batches:
                for n, batch in enumerate(batches, start=1):
                    self.heartbeat(f"epoch {batch.epoch} step {batch.index}")
                    rows.append(self.train_step(batch, batches.last_wait))
                    metrics.write(rows[-1])
                    if n % nb:
                        continue
                    epoch = batch.epoch
                    line = _epoch_line(epoch, rows)
                    rows = []
                    if (epoch + 1) % cfg.eval_every == 0 or epoch + 1 == cfg.epochs:
                        self.heartbeat(f"evaluation after epoch {epoch}")
                        last = self.evaluate(epoch)
                        metrics.write(last)
                        line += f"  val_acc {last['val_acc']:.3f}  test_acc {last['test_acc']:.3f}"
                    if self.rank == 0:
                        log(line)
                    if cfg.checkpoint_every and (epoch + 1) % cfg.checkpoint_every == 0:
                        self.heartbeat(f"checkpoint after epoch {epoch}")
                        checkpoint.save(self.engine, cfg.checkpoint_dir, epoch, cfg.seed, self.best)
        finally:
            metrics.close()
        if self.rank == 0 and last is not None:
            log(
                f"done: test_acc {last['test_acc']:.4f} (last epoch); best val_acc {self.best['val_acc']:.4f} "
                f"at epoch {self.best['epoch']} with test_acc {self.best['test_acc']:.4f}"
            )
        return {"last": last, "best": self.best}


def _epoch_line(epoch: int, rows: list[dict]) -> str:
    """One log line summarising an epoch's step rows."""
    mean = lambda key: float(np.mean([r[key] for r in rows]))  # noqa: E731
    dedup = 1.0 - mean("sampled_nodes_after_dedup") / max(mean("sampled_nodes_before_dedup"), 1.0)
    return (
        f"epoch {epoch:4d}  loss {mean('loss'):.4f}  train_acc {mean('train_acc'):.3f}  steps {len(rows)}  "
        f"step {mean('step_time_s') * 1e3:.0f} ms  wait {mean('queue_wait_s') * 1e3:.1f} ms  "
        f"nodes {mean('sampled_nodes_after_dedup'):.0f} (dedup -{100 * dedup:.0f}%)  "
        f"cache hit {100 * mean('cache_hit_rate'):.0f}%"
    )
