"""``auto``: the strategy that composes the others (AGP picks one from a profile and may switch).

Every candidate is prepared on the run's contiguous row split, so switching between steps moves no
data. The decision, its recalibration and the rows it reports live in ``dsgraph.agp.decide``; this
file makes them a strategy, so the training loop never asks which strategy it runs. It reads its
settings (the ``agp`` section, ``config.py``) and the model's shape from the ``StrategyContext``;
the strategy registry (``dsgraph/parallel/registry.py``) lists it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsgraph.agp.config import AgpConfig
from dsgraph.agp.decide import AutoStrategy, contiguous_shape
from dsgraph.ops.dispatch import resolve_backend
from dsgraph.parallel import auto_candidates, get_strategy
from dsgraph.parallel.spec import GraphAttention, Needs, Strategy

SHAPE = "auto_shape"  # the key of the graph's shape in RankGraph.derived


@dataclass(frozen=True)
class _Shape:
    """The graph's AGP shape, measured once on the CPU; it holds no tensors."""

    shape: object

    def to(self, device) -> _Shape:
        return self


class AutoAttention(GraphAttention):
    """Runs the current candidate; after each step the decision may change (collectively)."""

    def __init__(self, graph, pg, ctx, auto):
        self.graph, self.pg, self.ctx, self.auto = graph, pg, ctx, auto
        self.edges, self.degrees = graph.edges, graph.block.rowptr.diff()
        self._built: dict[str, GraphAttention] = {}

    @property
    def name(self) -> str:
        return self.auto.current

    @property
    def current(self) -> GraphAttention:
        name = self.auto.current
        if name not in self._built:
            self._built[name] = get_strategy(name).build(self.graph, self.pg, self.ctx)
        return self._built[name]

    def __call__(self, q_nHD, k_nHD, v_nHD, bias_eH=None, edge_values=None):
        return self.current(
            q_nHD, k_nHD, v_nHD, bias_eH, edge_values
        )  # edge values: only where every candidate takes them

    def after_step(self, step_s: float, comm_s: float) -> None:
        self.auto.after_step(step_s, comm_s)

    def row_fields(self) -> dict:
        return self.auto.metrics()

    def drain_events(self) -> list[dict]:
        events, self.auto.events = self.auto.events, []
        names = auto_candidates()
        for event in events:
            event["strategy_index"] = names.index(event["strategy"])
            body = "\n".join(f"- {r}" for r in event.get("reasons", []))
            event["text"] = ("decision", f"**{event['event']}**: {event['agp_decision']}\n\n{body}")
        return events


class Auto(Strategy):
    name = "auto"
    summary = "AGP picks a strategy from 'agp.profile' (falls back to ag without one) and may switch between steps"
    needs = Needs.WHOLE_GRAPH
    auto_candidate = False

    def _candidates(self):
        return [get_strategy(name) for name in auto_candidates()]

    @property
    def edge_values(self) -> bool:
        """Edge-conditioned values run under auto when every candidate it may pick takes them."""
        return all(candidate.edge_values for candidate in self._candidates())

    def prepare(self, graph, pg, ctx):
        for candidate in self._candidates():
            candidate.prepare(graph, pg, ctx)
        graph.derived[SHAPE] = _Shape(contiguous_shape(graph.whole, pg.counts))

    def build(self, graph, pg, ctx):
        if ctx.model is None:
            raise ValueError("strategy auto: the StrategyContext carries no model shape (StrategyContext.model)")
        agp = ctx.agp or AgpConfig()
        auto = AutoStrategy(
            agp.profile,
            agp.recalibrate_after,
            graph.derived[SHAPE].shape,
            ctx.model,
            pg,
            ctx.control_plane(),
            resolve_backend(ctx.backend, graph.device),
            ctx.dtype,
            ctx.log,
        )
        return AutoAttention(graph, pg, ctx, auto)

    def cost(self, p, shape, model, dtype_bytes):
        return "auto is not a candidate of its own"
