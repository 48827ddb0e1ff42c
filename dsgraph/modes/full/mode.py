"""Full-graph training: every epoch is one optimizer step on the whole graph, split over the ranks
by the configured graph-parallel strategy."""

from __future__ import annotations

from dsgraph.graph.encodings import widths
from dsgraph.modes.base import Mode, Step
from dsgraph.modes.full.link import LinkOnRanks
from dsgraph.modes.ranks import GraphOnRanks


class FullGraph(Mode):
    name = "full"

    def __init__(self, cfg, pg, control, log, heartbeat):
        self.cfg, self.link = cfg, None
        heartbeat("start-up: loading the graph")
        if getattr(cfg, "task", "node") == "link":
            on_ranks = lambda graph, outputs: GraphOnRanks(cfg, pg, control, log, graph, heartbeat, outputs)  # noqa: E731
            self.link = LinkOnRanks(cfg, pg, control, log, heartbeat, on_ranks)
            self.ranks = self.link.ranks
        else:
            self.ranks = GraphOnRanks(cfg, pg, control, log, heartbeat=heartbeat)
        self.pg = self.ranks.pg
        self.num_features, self.num_classes = self.ranks.graph.num_features, self.ranks.graph.num_classes
        self.num_edge_features = self.ranks.graph.num_edge_features
        self.multilabel = self.ranks.graph.nodes.y.ndim == 2
        self.encoding_widths = widths(self.ranks.graph.nodes.enc)

    def attach(self, device, dtype):
        self.ranks.attach(device, dtype)

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
        if self.link is not None:
            return self.link.step(epoch)
        nodes = self.ranks.graph.nodes
        return Step(epoch=epoch, x=nodes.x, attention=self.ranks.attention, node_ids=nodes.node_ids,
                    loss_rows=nodes.train_mask, labels=nodes.y[nodes.train_mask], global_count=self.ranks.train_count,
                    dropout_step=epoch, enc=nodes.enc)  # fmt: skip

    def eval_batch(self):
        return self.ranks.eval_batch() if self.link is None else self.link.eval_batch()
