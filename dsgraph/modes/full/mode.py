"""Full-graph training: every epoch is one optimizer step on the whole graph, split over the ranks
by the configured graph-parallel strategy."""

from __future__ import annotations

from dsgraph.agp.run_memory import alternatives, fit_run, predict_run
from dsgraph.graph.encodings import widths
from dsgraph.modes.base import EvalBatch, Mode, Step
from dsgraph.modes.ranks import GraphOnRanks


class FullGraph(Mode):
    name = "full"

    @classmethod
    def predict_memory(cls, cfg, dtype_bytes, world_size):
        return predict_run(cfg, dtype_bytes, world_size)

    @classmethod
    def memory_alternatives(cls, cfg, predicted, dtype_bytes, world_size, limit_mb):
        return alternatives(cfg, predicted, dtype_bytes, world_size, limit_mb)

    @classmethod
    def fit_memory(cls, cfg, ds_config, world_size):
        """The refusal of ``Mode.fit_memory``, or checkpointing turned on when only it makes the run
        fit (``agp.run_memory.fit_run``)."""
        return fit_run(cfg, ds_config, world_size)

    def __init__(self, cfg, pg, control, log, heartbeat, task):
        """``task``: the run's task object; it brings this rank's data (``task.rank_data``: node rows
        or node pairs) over the graph this mode splits."""
        self.cfg, self.log = cfg, log
        heartbeat("start-up: loading the graph")
        on_ranks = lambda graph, outputs: GraphOnRanks(cfg, pg, control, log, graph, heartbeat, outputs)  # noqa: E731
        self.data = task.rank_data(cfg, pg, control, log, heartbeat, on_ranks)
        self.ranks = self.data.ranks
        self.pg = self.ranks.pg
        self.num_features, self.num_classes = self.ranks.graph.num_features, self.ranks.graph.num_classes
        self.num_edge_features = self.ranks.graph.num_edge_features
        self.multilabel = self.ranks.graph.nodes.y.ndim == 2
        self.encoding_widths = widths(self.ranks.graph.nodes.enc)

    def attach(self, device, dtype):
        self.ranks.attach(device, dtype)
        from dsgraph.agp.launch import predicted_step_time_s

        self.device_type, self.dtype_bytes = device.type, dtype.itemsize
        self.predicted_mb: dict[str, float | None] = {}  # per strategy in use: the predicted peak per rank
        # AGP's step time of a named strategy (auto's decision reports its own), beside step_time_s
        try:
            self.predicted_step_s = predicted_step_time_s(self.cfg, dtype.itemsize, self.pg.world_size)
        except (ValueError, FileNotFoundError) as err:
            self.predicted_step_s = None
            self.log(f"no predicted step time in the metrics: {err}")

    def predicted_peak_mb(self) -> float | None:
        """The memory model's peak per rank (RSS on a CPU, the accelerator's memory on a GPU) of the
        strategy in use (``auto``: the one it runs now), beside the measured peak_mem_mb."""
        name = self.ranks.attention.name
        if name not in self.predicted_mb:
            import dataclasses

            from dsgraph.agp.run_memory import predict_run

            cfg = dataclasses.replace(self.cfg, strategy=name)
            predicted = predict_run(cfg, self.dtype_bytes, self.pg.world_size, device=self.device_type)
            self.predicted_mb[name] = None if predicted is None else round(predicted.total_mb, 1)
        return self.predicted_mb[name]

    def step_fields(self, step, summed):
        fields = dict(summed)
        peak = self.predicted_peak_mb()
        if peak is not None:
            fields["predicted_peak_mem_mb"] = peak
        if self.predicted_step_s is not None:
            fields["predicted_step_time_s"] = self.predicted_step_s
        return fields

    @property
    def train_attention(self):
        return self.ranks.attention

    @property
    def strategy_label(self) -> str:
        return self.ranks.attention.name

    def steps(self, start_epoch, end_epoch=None):
        for epoch in range(start_epoch, self.cfg.epochs if end_epoch is None else end_epoch):
            yield self.step(epoch)

    def step(self, epoch: int) -> Step:
        return self.data.step(epoch)

    def eval_batch(self) -> EvalBatch:
        return self.data.eval_batch()
