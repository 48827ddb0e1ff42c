"""Full-graph training: every epoch is one optimizer step on the whole graph, split over the ranks
by the configured graph-parallel strategy."""

from __future__ import annotations

from dsgraph.graph.encodings import widths
from dsgraph.modes.base import EvalBatch, Mode, Step
from dsgraph.modes.ranks import GraphOnRanks


class FullGraph(Mode):
    name = "full"

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

        self.predicted_mb = None  # the CPU rank's predicted peak RSS, beside the measured peak_mem_mb
        if device.type == "cpu":
            from dsgraph.agp.run_memory import predict_run

            predicted = predict_run(self.cfg, dtype.itemsize, self.pg.world_size)
            self.predicted_mb = None if predicted is None else round(predicted.total_mb, 1)
        # AGP's step time of a named strategy (auto's decision reports its own), beside step_time_s
        try:
            self.predicted_step_s = predicted_step_time_s(self.cfg, dtype.itemsize, self.pg.world_size)
        except (ValueError, FileNotFoundError) as err:
            self.predicted_step_s = None
            self.log(f"no predicted step time in the metrics: {err}")

    def step_fields(self, step, summed):
        fields = dict(summed)
        if self.predicted_mb is not None:
            fields["predicted_peak_mem_mb"] = self.predicted_mb
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
