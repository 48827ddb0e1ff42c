"""The full-graph training loop on a DeepSpeed engine.

Every rank holds the same parameters (DeepSpeed's data-parallel group is the whole job) and its own
node rows. The loss on rank r is ``local_sum * W / global_count``: ZeRO averages gradients over the
W ranks, so the update equals the single-process full-graph update.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import deepspeed
import deepspeed.comm as dist
import torch
import torch.nn.functional as F

from dsgraph.comm import GraphParallelGroup
from dsgraph.comm.control import make_control_plane
from dsgraph.models import GraphTransformer
from dsgraph.parallel import build_strategy
from dsgraph.train import checkpoint
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.graph_source import from_dataset, from_store
from dsgraph.train.metrics import MetricsWriter, peak_memory_mb
from dsgraph.train.trace import StepTracer


def init_distributed(timeout_s: float = 300.0) -> torch.device:
    """Joins the job's process group (rank and size from the launcher's environment, or from mpi4py
    under mpirun/mpiexec); collectives on the default group fail after ``timeout_s`` seconds."""
    accel = deepspeed.get_accelerator()
    backend = "nccl" if accel.device_name() == "cuda" else "gloo"
    port = int(os.environ.get("MASTER_PORT", 29500))  # mpi_discovery would overwrite MASTER_PORT with its default
    deepspeed.init_distributed(
        dist_backend=backend, auto_mpi_discovery=True, distributed_port=port, timeout=timedelta(seconds=timeout_s)
    )
    if accel.device_name() == "cuda":
        local = int(os.environ.get("LOCAL_RANK", 0))
        accel.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def build_model(cfg: DsgraphConfig, in_dim: int, num_classes: int) -> GraphTransformer:
    torch.manual_seed(cfg.seed)  # identical initial parameters on every rank
    return GraphTransformer(
        in_dim,
        num_classes,
        hidden=cfg.hidden,
        heads=cfg.heads,
        layers=cfg.layers,
        ffn_mult=cfg.ffn_mult,
        dropout=cfg.dropout,
        input_dropout=cfg.input_dropout,
        attention_dropout=cfg.attention_dropout,
        seed=cfg.seed,
    )


def _all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.get_world_size() > 1:
        dist.all_reduce(t)
    return t.tolist()


class Trainer:
    def __init__(self, cfg: DsgraphConfig, ds_config: dict, device: torch.device, log=print, heartbeat=None):
        """``heartbeat(phase)`` is called at every phase of the training loop (the entry point passes
        its watchdog's ``beat``); ``log`` receives rank 0's set-up messages."""
        self.cfg, self.device = cfg, device
        self.heartbeat = heartbeat or (lambda what: None)
        self.heartbeat("start-up: loading the graph")
        self.pg = GraphParallelGroup.from_world()
        self.control = make_control_plane(log if self.pg.rank == 0 else None)
        if cfg.partitions is not None:
            source = from_store(cfg.partitions, self.pg, self.control, cfg.self_loops)
        else:
            method = cfg.partition_method if cfg.strategy == "halo" else None
            source = from_dataset(cfg.dataset, cfg.seed, self.pg, self.control, cfg.self_loops, method)
        self.num_classes = source.num_classes
        self.auto = None
        if cfg.strategy == "auto":  # AGP: a rank-agreed pick that may change between steps
            from dsgraph.agp.decide import AutoStrategy

            self.auto = AutoStrategy.for_trainer(cfg, ds_config, source, self.pg, self.control, device, log)
            self.attention = self.auto.attention
        else:
            self.attention = build_strategy(cfg.strategy, source.graph, source.counts, self.pg, cfg.heads, cfg.backend, self.control)
        model = build_model(cfg, source.num_features, self.num_classes)
        self.heartbeat("start-up: deepspeed.initialize (engine, optimizer, op builds)")
        self.engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
        dtype = torch.bfloat16 if self.engine.bfloat16_enabled() else torch.float32
        self.local = source.local.to(device, dtype)
        self.heartbeat("start-up: the first collective (training-node count)")
        self.train_count = int(_all_reduce_sum([float(self.local.train_mask.sum())], device)[0])
        if self.train_count == 0:
            raise ValueError(f"dataset '{cfg.dataset}' has no training nodes (train_mask is empty)")
        self.world = self.pg.world_size
        self.start_epoch = 0
        self.best = {"val_acc": -1.0, "test_acc": 0.0, "epoch": -1}

    # --- one optimizer step on the whole graph -------------------------------------------------
    def train_step(self, epoch: int) -> dict:
        loc, engine = self.local, self.engine
        engine.train()
        self.pg.stats.reset()
        start = time.perf_counter()
        logits = engine(loc.x, self.attention, loc.node_ids, epoch)
        train_logits, train_y = logits[loc.train_mask].float(), loc.y[loc.train_mask]
        local_sum = F.cross_entropy(train_logits, train_y, reduction="sum")
        engine.backward(local_sum * self.world / self.train_count)
        engine.step()
        step_time = time.perf_counter() - start
        correct = float((train_logits.argmax(1) == train_y).sum())
        loss_sum, correct = _all_reduce_sum([float(local_sum.detach()), correct], self.device)
        row = {
            "kind": "step",
            "epoch": epoch,
            "step": engine.global_steps,
            "loss": loss_sum / self.train_count,
            "train_acc": correct / self.train_count,
            "val_acc": None,
            "test_acc": None,
            **self._system(step_time),
        }
        if self.auto is not None:  # may switch strategies for the next step (collective)
            self.auto.after_step(step_time, row["comm_time_s"])
            self.attention = self.auto.attention
        return row

    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict:
        loc, engine = self.local, self.engine
        engine.eval()
        self.pg.stats.reset()
        start = time.perf_counter()
        logits = engine(loc.x, self.attention, loc.node_ids, epoch).float()
        eval_time = time.perf_counter() - start
        pred = logits.argmax(1)
        sums = []
        for mask in (loc.train_mask, loc.val_mask, loc.test_mask):
            sums += [float((pred[mask] == loc.y[mask]).sum()), float(mask.sum())]
        loss = float(F.cross_entropy(logits[loc.train_mask], loc.y[loc.train_mask], reduction="sum"))
        totals = _all_reduce_sum(sums + [loss], self.device)
        acc = [totals[i] / max(totals[i + 1], 1.0) for i in (0, 2, 4)]
        row = {
            "kind": "eval",
            "epoch": epoch,
            "step": engine.global_steps,
            "loss": totals[6] / self.train_count,
            "train_acc": acc[0],
            "val_acc": acc[1],
            "test_acc": acc[2],
            **self._system(eval_time),
        }
        if acc[1] > self.best["val_acc"]:
            self.best = {"val_acc": acc[1], "test_acc": acc[2], "epoch": epoch}
        row["best_val_acc"], row["test_acc_at_best_val"] = self.best["val_acc"], self.best["test_acc"]
        return row

    def _system(self, step_time: float) -> dict:
        agp = self.auto.metrics() if self.auto is not None else {}
        return {
            "strategy": self.cfg.strategy if self.auto is None else self.auto.current,
            **agp,
            "world_size": self.world,
            "step_time_s": step_time,
            "comm_time_s": self.pg.stats.time_s,
            "comm_bytes": self.pg.stats.bytes_sent,
            "peak_mem_mb": peak_memory_mb(self.device),
        }

    # --- the loop ---------------------------------------------------------------------------
    def resume(self) -> None:
        state = checkpoint.load_latest(self.engine, self.cfg.checkpoint_dir, self.cfg.seed)
        self.start_epoch, self.best = state["epoch"] + 1, state["best"]

    def fit(self, log=print) -> dict:
        cfg = self.cfg
        rank = self.pg.rank
        metrics = MetricsWriter(cfg.metrics_out, self.engine.monitor, rank, append=self.start_epoch > 0)
        tracer = StepTracer(cfg.trace_steps, cfg.trace_dir, rank)
        last = None
        try:
            for epoch in range(self.start_epoch, cfg.epochs):
                self.heartbeat(f"epoch {epoch}")
                if self.auto is not None:
                    self.auto.write_events(metrics, self.engine)
                tracer.begin(epoch)
                row = self.train_step(epoch)
                tracer.end(epoch)
                metrics.write(row)
                line = f"epoch {epoch:4d}  loss {row['loss']:.4f}  train_acc {row['train_acc']:.3f}"
                if (epoch + 1) % cfg.eval_every == 0 or epoch + 1 == cfg.epochs:
                    self.heartbeat(f"evaluation after epoch {epoch}")
                    last = self.evaluate(epoch)
                    metrics.write(last)
                    line += f"  val_acc {last['val_acc']:.3f}  test_acc {last['test_acc']:.3f}"
                line += f"  step {row['step_time_s'] * 1e3:.0f} ms (comm {row['comm_time_s'] * 1e3:.0f} ms)"
                if rank == 0:
                    log(line)
                if cfg.checkpoint_every and (epoch + 1) % cfg.checkpoint_every == 0:
                    self.heartbeat(f"checkpoint after epoch {epoch}")
                    checkpoint.save(self.engine, cfg.checkpoint_dir, epoch, cfg.seed, self.best)
            if self.auto is not None:
                self.auto.write_events(metrics, self.engine)
        finally:
            tracer.close()
            metrics.close()
        if rank == 0 and last is not None:
            log(
                f"done: test_acc {last['test_acc']:.4f} (last epoch); best val_acc {self.best['val_acc']:.4f} "
                f"at epoch {self.best['epoch']} with test_acc {self.best['test_acc']:.4f}"
            )
        return {"last": last, "best": self.best}

