"""The training loop on a DeepSpeed engine, for every mode and strategy.

Every rank holds the same parameters (DeepSpeed's data-parallel group is the whole job) and its own
rows. The loss on rank r is ``sum(w_i * loss_i) * W / global_count``: ZeRO averages gradients over
the W ranks, so the update equals the single-process full-graph (or global-batch) update; a mode
whose steps are local (isolated training) brings its own synchronisation (``modes/sync.py``). The
task (``dsgraph/tasks``) builds the model and computes losses and metrics; the mode
(``dsgraph/modes``) makes the steps; the loop runs them, evaluates, logs, traces and checkpoints.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import deepspeed
import deepspeed.comm as dist
import torch

from dsgraph.agp.run_memory import dtype_bytes_of
from dsgraph.comm import GraphParallelGroup
from dsgraph.comm.control import make_control_plane
from dsgraph.models.checkpointing import checkpoint_blocks, recompute_selectively
from dsgraph.modes.base import EvalBatch, Step, joined, labels_of
from dsgraph.modes.registry import make_mode
from dsgraph.ops.cpu.warm_up import compile_kernels
from dsgraph.tasks import get_task
from dsgraph.tasks.base import metric_key
from dsgraph.train import checkpoint, forecast, nonfinite, run_name
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.metrics import MetricsWriter, Row, peak_memory_mb, per_rank_row
from dsgraph.train.preemption import Preempted, Preemption
from dsgraph.train.trace import StepTracer
from dsgraph.train.utilisation import Utilisation


def init_distributed(timeout_s: float = 300.0, *, mpi_discovery: bool = True) -> torch.device:
    """Joins the job's process group (rank and size from the launcher's environment, or from mpi4py
    under mpirun/mpiexec with ``mpi_discovery``); collectives on the default group fail after
    ``timeout_s`` seconds. Returns this rank's training device. DeepSpeed's CPU shared-memory
    all-reduce, which training never uses, is kept out (see ``shm.py``)."""
    from dsgraph.runtime import shm

    shm.disable_shm_allreduce()
    accel = deepspeed.get_accelerator()
    backend = "nccl" if accel.device_name() == "cuda" else "gloo"
    port = int(os.environ.get("MASTER_PORT", 29500))  # mpi_discovery would overwrite MASTER_PORT with its default
    deepspeed.init_distributed(
        dist_backend=backend,
        auto_mpi_discovery=mpi_discovery,
        distributed_port=port,
        timeout=timedelta(seconds=timeout_s),
        verbose=False,
    )
    if accel.device_name() == "cuda":
        local = int(os.environ.get("LOCAL_RANK", 0))
        accel.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def build_model(
    cfg: DsgraphConfig, in_dim: int, num_classes: int, encoding_widths: dict[str, int] | None = None, edge_dim: int = 0
) -> torch.nn.Module:
    """The model of the run's task (``Task.build_model``): ``num_classes`` outputs per node (a link
    task's encoder has the embedding width instead, and a decoder); ``encoding_widths``: the widths
    of the encoding arrays the data carries; ``edge_dim``: F_e of the dataset's edge features (0: none)."""
    return get_task(cfg.task)(cfg).build_model(in_dim, num_classes, encoding_widths, edge_dim)


def sum_over_ranks(values: list[float], device: torch.device, pg: GraphParallelGroup) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if pg.world_size > 1:
        dist.all_reduce(t)
    return t.tolist()


def _named(cfg: DsgraphConfig, control, ds_config: dict) -> DsgraphConfig:
    """``cfg`` with a run name in its paths (the command names runs; a Trainer built in Python gets
    'dsgraph-<rank 0's UTC time stamp>'); traces go to the TensorBoard folder of ``ds_config``, if any."""
    if (
        cfg.run_name is not None
        and cfg.checkpoint_dir is not None
        and cfg.trace_dir is not None
        and not any("{run_name}" in (getattr(cfg, k) or "") for k in run_name.PATH_KEYS)
    ):
        return cfg
    name = cfg.run_name or control.bcast(run_name.default_run_name("dsgraph"), root=0)
    return run_name.with_run_name(cfg, name, tensorboard_run=run_name.tensorboard_run_dir(ds_config))


def new_best(metric: str, higher_is_better: bool = True) -> dict:
    """The model-selection state: the best validation value of ``metric`` (the highest, or the
    lowest when lower is better), its epoch's test value."""
    worst = float("-inf") if higher_is_better else float("inf")
    return {"metric": metric, "val": worst, "test": float("nan"), "epoch": -1}


def upgrade_best(best: dict, metric: str, higher_is_better: bool = True) -> dict:
    """A checkpoint's model-selection state for this run's metric (checkpoints from before the
    metric key held val_acc/test_acc); another metric's state starts over."""
    if "val_acc" in best and "metric" not in best:
        best = {"metric": "accuracy", "val": best["val_acc"], "test": best["test_acc"], "epoch": best["epoch"]}
    return best if best.get("metric") == metric else new_best(metric, higher_is_better)


def improves(value: float, best: float, higher_is_better: bool) -> bool:
    """Whether ``value`` beats ``best`` (NaN, a one-class val split, never does)."""
    return value > best if higher_is_better else value < best


class Trainer:
    def __init__(self, cfg: DsgraphConfig, ds_config: dict, device: torch.device, log=print, heartbeat=None):
        """``heartbeat(phase)`` is called at every phase of set-up and of the loop (the entry point
        passes its watchdog's ``beat``); ``log`` receives rank 0's set-up messages."""
        self.heartbeat = heartbeat or (lambda what: None)
        self.pending_rows: list[dict] = []  # metrics rows for fit to write first (a restart event)
        pg = GraphParallelGroup.from_world()
        rank_log = log if pg.rank == 0 else (lambda line: None)
        control = make_control_plane(rank_log if pg.rank == 0 else None)
        self.cfg, self.device, self.control = _named(cfg, control, ds_config), device, control
        cfg = self.cfg
        self.task = get_task(cfg.task)(cfg)
        if device.type == "cpu" and cfg.backend in ("auto", "cpu"):
            self.heartbeat("start-up: compiling the CPU kernels (cached on disk after the first run)")
            compile_kernels(torch.bfloat16 if dtype_bytes_of(ds_config) == 2 else torch.float32)
        self.mode = make_mode(cfg, pg, control, rank_log, self.heartbeat, self.task)
        self.task.set_data(self.mode.num_classes, self.mode.multilabel)
        self.pg = self.mode.pg
        self.sync = self.mode.sync()  # gradient reduction every step, or local steps (isolated mode)
        host = control.allgather(round(peak_memory_mb(torch.device("cpu"))))
        rank_log(
            "peak host memory after loading the graph: " + ", ".join(f"rank {r} {mb:,} MB" for r, mb in enumerate(host))
        )
        mode = self.mode
        model = self.task.build_model(mode.num_features, mode.num_classes, mode.encoding_widths, mode.num_edge_features)
        if cfg.checkpoint_activations:
            checkpoint_blocks(model, cfg.checkpoint_every_layers, cfg.checkpoint_nested)
        if cfg.selective_recompute:
            recompute_selectively(model)
        self.heartbeat("start-up: deepspeed.initialize (engine, optimizer, op builds)")
        ds_config = self.sync.engine_config(ds_config)
        self.engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
        self.sync.attach(self.engine, self.pg)
        self.heartbeat("start-up: moving the rank's graph and data to the device")
        self.mode.attach(device, torch.bfloat16 if self.engine.bfloat16_enabled() else torch.float32)
        self.world = self.pg.world_size
        self.start_epoch = 0
        self.metric = self.task.metric(cfg.metric)
        self.higher_is_better = self.task.higher_is_better(self.metric)
        rank_log(f"{self.task.describe()}; model selection by {self.metric}")
        self.best = new_best(self.metric, self.higher_is_better)
        self.stopped_early_at: int | None = None
        self.lr = nonfinite.LearningRateScale(self.engine)
        self.last_save: tuple[int, str | None] = (-1, None)  # (epoch, folder or None: refused) of the last save
        self.skipped: set[tuple[int, int]] = set()  # (epoch, index) of steps a rollback skips
        self.forecast = forecast.Forecast()  # predicted against measured step time and peak memory (forecast.py)
        self._finding: str | None = None  # this rank's non-finite finding, not yet agreed on
        self._flagged: list[int] = []  # the ranks that found one in the last reducing step

    # --- one optimizer step, one evaluation ----------------------------------------------------
    def train_step(self, step: Step) -> dict:
        engine = self.engine
        engine.train()
        self.pg.stats.reset()
        start = time.perf_counter()
        dropout_step = engine.global_steps if step.dropout_step is None else step.dropout_step
        pairs = () if step.pairs is None else (step.pairs,)  # a link task's model scores its pairs
        logits = engine(step.x, step.attention, step.node_ids, dropout_step, step.enc, *pairs)[step.loss_rows].float()
        losses, correct, counted = self.task.losses(logits, step.labels)
        weighted = losses.sum() if step.weights is None else (losses * step.weights).sum()
        engine.backward(weighted * (1 if step.local else self.world) / step.global_count)
        self.sync.before_step(step)
        self.lr.before_step()
        skipped = engine.skipped_steps
        engine.step()
        skipped = engine.skipped_steps > skipped and not engine.fp16_enabled()
        self.lr.after_step()
        sync_bytes = self.sync.after_step(step)
        if self.device.type == "cuda":  # kernels run asynchronously: the step ends when the device is done
            torch.cuda.synchronize(self.device)
        step_time = time.perf_counter() - start
        sums = [float(losses.detach().sum()), float(correct), float(counted), *step.summed.values()]
        self._finding = self._finding or nonfinite.local_finding(sums[0], engine.module, skipped)
        if step.reduce:  # the ranks' non-finite flags travel with the sums
            flags = nonfinite.flags(self._finding, self.pg.rank, self.world)
            sums = sum_over_ranks(sums + flags, self.device, self.pg)
            sums, self._flagged = sums[: -self.world], nonfinite.flagged(sums[-self.world :])
        count = step.global_count if step.reduce else max(sums[2], 1.0)  # else: this rank's own rows only
        summed = dict(zip(step.summed, sums[3:]))
        extra = {**step.fields, **self.mode.step_fields(step, summed)}
        row = Row(
            kind="step",
            epoch=step.epoch,
            step=engine.global_steps,
            loss=sums[0] / count,
            train_acc=sums[1] / max(sums[2], 1.0),
            **self._system(step_time, extra, step.input_bytes, sync_bytes),
        )
        attention = self.mode.train_attention
        if attention is not None:  # e.g. auto may switch strategies for the next step (collective)
            attention.after_step(step_time, row.comm_time_s)
        return row.as_dict()

    def train_epoch(self, epoch: int) -> dict:
        """Runs every step of ``epoch``; returns the last step's row."""
        return [self.train_step(step) for step in self.mode.steps(epoch, epoch + 1)][-1]

    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict:
        engine = self.engine
        engine.eval()
        self.pg.stats.reset()
        start = time.perf_counter()
        outputs, batch = self._eval_outputs(engine, f"evaluation after epoch {epoch}")
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        eval_time = time.perf_counter() - start
        all_reduce = (lambda t: dist.all_reduce(t)) if self.world > 1 else (lambda t: None)
        values = self.task.evaluate(outputs, batch, self.metric, all_reduce)
        key = metric_key(self.metric)
        val, test = values[f"val_{key}"], values[f"test_{key}"]
        if improves(val, self.best["val"], self.higher_is_better):
            tests = {k: v for k, v in values.items() if k.startswith("test_")}  # every test column at the best epoch
            self.best = {**self.best, "val": val, "test": test, "epoch": epoch, "tests": tests}
        best = {
            f"best_val_{key}": self.best["val"],
            f"test_{key}_at_best_val": self.best["test"],
            "metric": self.metric,
        }
        extra = {k: v for k, v in values.items() if k not in ("loss", "train_acc", "val_acc", "test_acc")}
        row = Row(
            kind="eval",
            epoch=epoch,
            step=engine.global_steps,
            loss=values["loss"],
            train_acc=values["train_acc"],
            val_acc=values["val_acc"],
            test_acc=values["test_acc"],
            **self._system(eval_time, {**extra, **best}),
        )
        return row.as_dict()

    def _eval_outputs(self, engine, phase: str) -> tuple[torch.Tensor, EvalBatch]:
        """The model's outputs over this rank's evaluation rows, and their batch: one forward, or one
        per batch of a mode that evaluates out of core. A node task keeps the outputs, labels and
        masks of the rows in a split only (``labels_of``), so each subgraph goes as soon as its
        forward has run. Each batch is a heartbeat (``phase``): an evaluation of many batches can
        take longer than the heartbeat timeout as a whole (sampled rmat:24: 4,097 batches)."""
        parts = []
        self.heartbeat(phase)
        for batch in self.mode.eval_batches():
            dropout_step = engine.global_steps if batch.dropout_step is None else batch.dropout_step
            outputs = self.task.outputs(engine, batch, dropout_step)
            parts.append((outputs, batch) if batch.pairs is not None else labels_of(outputs, batch))
            del batch  # before the next subgraph loads
            self.heartbeat(phase)
        return joined(parts)

    def _system(self, seconds: float, extra: dict, input_bytes: int = 0, sync_bytes: int = 0) -> dict:
        """The columns every row has, and ``extra`` with the strategy's own (AGP's decision)."""
        attention = self.mode.train_attention
        fields = attention.row_fields() if attention is not None else {}
        return {
            "strategy": self.mode.strategy_label,
            "mode": self.mode.name,
            "world_size": self.world,
            "step_time_s": seconds,
            "comm_time_s": self.pg.stats.time_s,
            "comm_bytes": self.pg.stats.bytes_sent + input_bytes,
            "sync_bytes": sync_bytes,
            "peak_mem_mb": peak_memory_mb(self.device),
            "extra": {**fields, **extra},
        }

    # --- the loop ---------------------------------------------------------------------------
    def resume(self) -> None:
        self.heartbeat("loading the latest checkpoint")
        self.resumed = checkpoint.load_latest(self.engine, self.cfg, heartbeat=self.heartbeat)
        state = self.resumed.client_state
        self.start_epoch = state["epoch"] + 1
        self.best = upgrade_best(state["best"], self.metric, self.higher_is_better)
        self.lr.factor = state.get("lr_scale", 1.0)

    def _write_events(self, metrics: MetricsWriter) -> None:
        attention = self.mode.train_attention
        for event in attention.drain_events() if attention is not None else []:
            metrics.write({**event, "step": self.engine.global_steps})

    def _write_forecast(self, metrics: MetricsWriter, log) -> None:
        """The run's predicted against measured step time and peak memory (collective: every rank's peak)."""
        peaks = self.control.allgather(peak_memory_mb(self.device))
        row = self.forecast.row(peaks)
        if row is None:
            return
        metrics.write({**row, "step": self.engine.global_steps})
        if self.pg.rank == 0:
            log(forecast.describe(row))

    def _write_per_rank(self, metrics: MetricsWriter, kind: str, figures: list[dict]) -> None:
        """Every rank's ``figures`` (dicts with epoch, step and numbers; the same length on every rank)
        gathered to rank 0 and written as ``kind`` rows with one column per figure and rank."""
        ranks = self.control.allgather(figures)
        for i, first in enumerate(ranks[0]):
            numbers = [{k: v for k, v in r[i].items() if k not in ("epoch", "step")} for r in ranks]
            metrics.write(per_rank_row(kind, first["epoch"], first["step"], numbers))

    def _end_of_epoch(self, epoch: int, rows: list[dict], metrics: MetricsWriter, log) -> dict | None:
        """Evaluation, the log line and the checkpoint after the last step of ``epoch``."""
        cfg, last = self.cfg, None
        line = self.mode.epoch_line(epoch, rows)
        if (epoch + 1) % cfg.eval_every == 0 or epoch + 1 == cfg.epochs:
            last = self.evaluate(epoch)
            metrics.write(last)
            key = metric_key(self.metric)
            line += f"  val_{key} {last[f'val_{key}']:.3f}  test_{key} {last[f'test_{key}']:.3f}"
        if self.pg.rank == 0:
            log(line + self.mode.step_time_note(rows))
        if cfg.checkpoint_every and (epoch + 1) % cfg.checkpoint_every == 0:
            self.heartbeat(f"checkpoint after epoch {epoch}")
            self._save(epoch, metrics)
        return last

    def _save(self, epoch: int, metrics: MetricsWriter | None = None) -> str | None:
        """The checkpoint of ``epoch`` (None: the disk refused it and the run continues; a metrics event says so)."""
        folder = checkpoint.save(self.engine, self.cfg, epoch, self.best, {"lr_scale": self.lr.factor})
        self.last_save = (epoch, folder)
        if folder is None and metrics is not None:
            metrics.write(
                {"kind": "event", "event": "checkpoint_failed", "epoch": epoch, "step": self.engine.global_steps}
            )
        return folder

    def fit(self, log=print) -> dict:
        cfg, rank = self.cfg, self.pg.rank
        metrics = MetricsWriter(cfg.metrics_out, self.engine.monitor, rank, append=self.start_epoch > 0)
        tracer = StepTracer(cfg.trace_steps, cfg.trace_dir, rank)
        for row in self.pending_rows:
            metrics.write(row)
        usage, last = Utilisation(self.device), None
        preemption = Preemption(cfg.preempt_signals).install()
        try:
            while True:
                try:
                    last = self._epochs(metrics, tracer, usage, preemption, log) or last
                    break
                except _RollBack as back:
                    self._roll_back(back.fault, metrics, log)
            self._write_events(metrics)
            self._write_forecast(metrics, log)
        finally:
            preemption.uninstall()
            tracer.close()
            usage.close()
            metrics.close()
            self.mode.close()
        if rank == 0 and self.stopped_early_at is not None:
            log(
                f"early stop after epoch {self.stopped_early_at}: {cfg.early_stop_patience} evaluations without a "
                "better "
                f"val_{metric_key(self.metric)} than at epoch {self.best['epoch']}"
            )
        if rank == 0 and last is not None:
            key = metric_key(self.metric)
            log(
                f"done: test_{key} {last[f'test_{key}']:.4f} (last epoch); best val_{key} {self.best['val']:.4f} "
                f"at epoch {self.best['epoch']} with test_{key} {self.best['test']:.4f}"
            )
            published = self.task.published(_trained_dataset(cfg))
            if published is not None:
                log(published)
        return {"last": last, "best": self.best, "stopped_early_at": self.stopped_early_at}

    def _epochs(
        self, metrics: MetricsWriter, tracer: StepTracer, usage: Utilisation, preemption: Preemption, log
    ) -> dict | None:
        """Trains from ``start_epoch`` to the end (or an early stop); returns the last evaluation row."""
        last, rows, index = None, [], 0
        for step in self.mode.steps(self.start_epoch):
            if (step.epoch, index) not in self.skipped:
                self.heartbeat(f"epoch {step.epoch}")
                self._write_events(metrics)
                tracer.begin(step.epoch, self.engine.global_steps + 1)
                rows.append(self.train_step(step))
                self.forecast.add(rows[-1])
                if tracer.end(step.epoch, step.ends_epoch):
                    self._write_per_rank(metrics, "trace", tracer.figures)
                metrics.write(rows[-1])
                self._check_nonfinite(step, index, metrics)
            index += 1
            if step.ends_epoch:
                if rows:  # else a rollback skipped the epoch's only step
                    sample = {"epoch": step.epoch, "step": rows[-1]["step"], **usage.sample()}
                    self._write_per_rank(metrics, "util", [sample])
                    last = self._end_of_epoch(step.epoch, rows, metrics, log) or last
                rows, index = [], 0
                self._check_preemption(preemption, step.epoch)
                if self._stalled(step.epoch):
                    self.stopped_early_at = step.epoch
                    break
        return last

    def _check_nonfinite(self, step: Step, index: int, metrics: MetricsWriter) -> None:
        """Every rank, after a step: whether a rank found a non-finite value (agreed in the step's
        reduction, or at the epoch's end for steps that do not reduce), and the configured action."""
        if not step.reduce:
            if not step.ends_epoch:
                return
            flags = nonfinite.flags(self._finding, self.pg.rank, self.world)
            self._flagged = nonfinite.flagged(sum_over_ranks(flags, self.device, self.pg))
        if not self._flagged:
            return
        fault = nonfinite.Fault(step.epoch, index, self.engine.global_steps, self._flagged, self._finding)
        self._finding, self._flagged = None, []
        if self.cfg.nonfinite == "stop":
            metrics.write(fault.event("stop", self.lr.factor))
            raise nonfinite.NonFiniteError(fault.message(self.pg.rank) + " (nonfinite: 'stop')")
        raise _RollBack(fault)

    def _roll_back(self, fault: nonfinite.Fault, metrics: MetricsWriter, log) -> None:
        """Reloads the newest checkpoint, lowers the learning rate and skips the failed step."""
        scale = self.lr.factor * self.cfg.nonfinite_lr_factor
        try:
            self.resume()
        except FileNotFoundError as err:
            raise nonfinite.NonFiniteError(f"{fault.message(self.pg.rank)}; cannot roll back: {err}") from None
        self.lr.factor = scale
        self.skipped.add((fault.epoch, fault.index))
        metrics.write(fault.event("rollback", scale))
        if self.pg.rank == 0:
            log(f"{fault.message(0)}; rolled back to {self.resumed.path}, learning rate x{scale:g}, skipping that step")

    def _stalled(self, epoch: int) -> bool:
        """Whether the last ``early_stop_patience`` evaluations up to ``epoch`` all came after the best
        one (counted from the epochs, so a resumed run counts the same)."""
        patience, every = self.cfg.early_stop_patience, self.cfg.eval_every
        if not patience or (epoch + 1) % every:
            return False
        return sum(1 for e in range(self.best["epoch"] + 1, epoch + 1) if (e + 1) % every == 0) >= patience

    def _check_preemption(self, preemption: Preemption, epoch: int) -> None:
        """At an epoch end (every rank): if any rank was signalled, checkpoint and raise Preempted."""
        cfg = self.cfg
        agreed = epoch + 1 < cfg.epochs and preemption.agreed(self.device, self.world)
        if not agreed or not self.mode.can_checkpoint(cfg, epoch):
            return
        if not checkpoint.due(cfg, epoch):  # else _end_of_epoch has just saved it
            self.heartbeat(f"preemption checkpoint after epoch {epoch}")
            self._save(epoch)
        folder = self.last_save[1] if self.last_save[0] == epoch else None
        if folder is None:  # the disk refused it (checkpoint_failure 'continue')
            raise Preempted(epoch, preemption.received, cfg.checkpoint_dir, written=False)
        raise Preempted(epoch, preemption.received, folder)

    def close(self) -> None:
        self.mode.close()


class _RollBack(Exception):
    """Raised out of the epochs loop to roll back for ``fault`` (nonfinite: 'rollback')."""

    def __init__(self, fault: nonfinite.Fault):
        super().__init__(fault.message(0))
        self.fault = fault


def _trained_dataset(cfg) -> str:
    """The dataset the run trained on: the partition store's (its META.json names it), else the config's."""
    if cfg.partitions:
        from dsgraph.graph.store import read_meta

        return str(read_meta(cfg.partitions).get("dataset", cfg.dataset))
    return cfg.dataset
