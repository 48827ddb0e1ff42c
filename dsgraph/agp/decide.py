"""``"strategy": "auto"`` in training: one decision agreed by every rank, recalibrated from measured
steps, and a switch between strategies between steps when another is predicted >= 20% faster.

Rank 0 predicts every candidate at the job's world size from the profile and broadcasts the decision
through the control plane (mpi4py or torch object collectives). All candidates (ag, a2a, halo) use
the dataset's own node order split into even contiguous ranges, so a switch moves no data: a
strategy is only a callable on the rank's rows. (GP-Halo on a METIS order is the explicit
``"strategy": "halo"``.) When the profile is missing, malformed, from another backend or dtype, or
does not cover the world size, training falls back to ``FALLBACK`` and says why.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

from dsgraph.agp.choose import SWITCH_GAIN, choose
from dsgraph.agp.model import Calibration, GraphShape, HaloShape, ModelShape, Prediction, predict
from dsgraph.agp.profile import load_profile

FALLBACK = "ag"  # works for every head count and node order
CANDIDATES = ("ag", "a2a", "halo")


def contiguous_shape(graph, counts: list[int]) -> GraphShape:
    """N, E, the edges and the halo of each even contiguous range (the split auto training uses)."""
    from dsgraph.graph.partition import partition_quality

    starts = np.concatenate([[0], np.cumsum(counts)])
    q = partition_quality(graph, np.stack([starts[:-1], starts[1:]], axis=1))
    p = len(counts)
    return GraphShape(graph.num_nodes, graph.num_edges, {p: q.part_edges}, {p: HaloShape(q.part_nodes, q.part_edges, q.halo_sizes)})


@dataclass
class Decision:
    strategy: str
    predicted_step_time_s: float | None
    reasons: list[str]
    table: list[dict] = field(default_factory=list)
    fallback: bool = False

    def label(self) -> str:
        """Short text for step rows: the strategy and why."""
        if self.fallback:
            return f"{self.strategy} (fallback: {self.reasons[0]})"
        return f"{self.strategy} (auto: {self.reasons[0]})"


def plan_decision(cfg, graph, counts: list[int], world: int, backend: str, dtype: str, calibration=Calibration(), measured=None) -> tuple[Decision, list[Prediction]]:
    """Rank 0's decision at ``world`` ranks. Raises ValueError/FileNotFoundError on a bad profile."""
    if not cfg.agp_profile:
        raise ValueError("\"strategy\": \"auto\" needs 'agp_profile' (a JSON from `dsgraph profile`)")
    profile = load_profile(cfg.agp_profile)
    profile.check_matches(backend, dtype)
    if world not in profile.ranks:
        raise ValueError(f"{cfg.agp_profile}: the profile covers rank counts {sorted(profile.ranks)}, not the world size {world}")
    shape = contiguous_shape(graph, counts)
    model = ModelShape(layers=cfg.layers, hidden=cfg.hidden, heads=cfg.heads, ffn_mult=cfg.ffn_mult,
                       in_dim=graph.num_features, num_classes=graph.num_classes)  # fmt: skip
    preds = [predict(s, world, shape, model, profile, calibration=calibration) for s in CANDIDATES]
    if measured:  # strategies already run: their measured time replaces the prediction
        preds = [_with_time(x, measured[x.strategy]) if x.strategy in measured and x.feasible else x for x in preds]
    choice = choose(preds, world_size=world)
    return Decision(choice.best.strategy, choice.best.time_s, choice.reasons, [x.as_dict() for x in preds]), preds


def _with_time(x: Prediction, seconds: float) -> Prediction:
    d = x.as_dict()
    d.update(time_s=seconds, reason="measured")
    return Prediction(**d)


class AutoStrategy:
    """The strategy in use under ``"strategy": "auto"`` and the recalibration that may change it.

    Every method is collective (all ranks call it at the same step). ``attention`` is the current
    strategy object; ``events`` collects metrics rows (kind "agp") for the trainer to write."""

    def __init__(self, cfg, graph, counts, pg, control, backend: str, dtype: str, build, log=print):
        self.cfg, self.graph, self.counts, self.pg, self.control = cfg, graph, counts, pg, control
        self.backend, self.dtype, self.build, self.log = backend, dtype, build, log
        self.events: list[dict] = []
        self.built: dict[str, object] = {}
        self.samples: list[tuple[float, float]] = []  # (step s, comm s) of the current strategy
        self.measured: dict[str, float] = {}  # strategy -> measured median step time (each is measured once)
        decision = None
        if pg.rank == 0:
            try:
                decision, _ = plan_decision(cfg, graph, counts, pg.world_size, backend, dtype)
            except (ValueError, FileNotFoundError) as err:
                decision = Decision(FALLBACK, None, [str(err)], fallback=True)
        self._adopt(control.bcast(decision), event="decision")

    @property
    def current(self) -> str:
        return self.decision.strategy

    @property
    def attention(self):
        name = self.current
        if name not in self.built:
            self.built[name] = self.build(name)
        return self.built[name]

    def _adopt(self, decision: Decision, event: str, measured_s: float | None = None) -> None:
        self.decision = decision
        self.samples = []
        self.events.append({
            "kind": "agp", "event": event, "step": None, "strategy": decision.strategy,
            "predicted_step_time_s": decision.predicted_step_time_s, "measured_step_time_s": measured_s,
            "fallback": decision.fallback, "agp_decision": decision.label(), "reasons": decision.reasons,
            "table": decision.table,
        })  # fmt: skip
        if self.pg.rank == 0:
            self.log(f"agp: {event}: {decision.label()}")

    def switch_to(self, name: str, reason: str) -> None:
        """Uses strategy ``name`` from the next step on (collective; results stay the same)."""
        self._adopt(Decision(name, None, [reason], self.decision.table), event="switch")

    def after_step(self, step_s: float, comm_s: float) -> None:
        """Records a measured step; after ``agp_recalibrate_after`` steps (the first step of a
        strategy is a warm-up and not counted) rank 0 recalibrates and all ranks adopt its verdict."""
        self.samples.append((step_s, comm_s))
        after = self.cfg.agp_recalibrate_after
        if self.decision.fallback or after <= 0 or self.current in self.measured or len(self.samples) < after + 1:
            return
        steady = self.samples[1:]
        step_med = statistics.median(s for s, _ in steady)
        comm_med = statistics.median(c for _, c in steady)
        self.measured[self.current] = step_med
        verdict = None
        if self.pg.rank == 0:
            verdict = self._recalibrated(step_med, comm_med)
        verdict = self.control.bcast(verdict)
        if verdict is not None:
            self._adopt(verdict, event="switch", measured_s=step_med)
        else:
            self.events.append({"kind": "agp", "event": "recalibrated", "step": None, "strategy": self.current,
                                "predicted_step_time_s": self.decision.predicted_step_time_s, "measured_step_time_s": step_med,
                                "agp_decision": self.decision.label()})  # fmt: skip

    def _recalibrated(self, step_med: float, comm_med: float) -> Decision | None:
        """Rank 0: fit comm scale and overhead to the measured steps, re-predict; a Decision to
        switch when another strategy is predicted at least SWITCH_GAIN faster, else None."""
        world = self.pg.world_size
        _, base = plan_decision(self.cfg, self.graph, self.counts, world, self.backend, self.dtype)
        now = next(x for x in base if x.strategy == self.current)
        comm_scale = comm_med / now.comm_s if now.comm_s > 0 and comm_med > 0 else 1.0
        overhead = (step_med - comm_med) - (now.time_s - now.comm_s)
        cal = Calibration(comm_scale={self.current: comm_scale}, overhead_s=overhead)
        decision, preds = plan_decision(self.cfg, self.graph, self.counts, world, self.backend, self.dtype, cal, self.measured)
        here = next(x for x in preds if x.strategy == self.current)
        best = min((x for x in preds if x.feasible), key=lambda x: x.time_s)
        if best.strategy != self.current and best.time_s <= (1.0 - SWITCH_GAIN) * here.time_s:
            decision.reasons.insert(0, f"recalibrated (comm x{comm_scale:.2f}, overhead {overhead * 1e3:+.1f} ms): "
                                       f"{best.strategy} {best.time_s * 1e3:.1f} ms vs {self.current} measured {step_med * 1e3:.1f} ms")  # fmt: skip
            return decision
        self.decision.predicted_step_time_s = here.time_s
        return None

    # --- the trainer's side -------------------------------------------------------------------
    @classmethod
    def for_trainer(cls, cfg, ds_config: dict, source, pg, control, device, log=print) -> "AutoStrategy":
        """The auto strategy of a Trainer: candidates built on ``source``'s graph and row split."""
        from dsgraph.ops.dispatch import resolve_backend
        from dsgraph.parallel import build_strategy

        backend = resolve_backend(cfg.backend, device)
        dtype = "bfloat16" if (ds_config.get("bf16") or {}).get("enabled") else "float32"

        def build(name: str):
            return build_strategy(name, source.graph, source.counts, pg, cfg.heads, cfg.backend, control)

        return cls(cfg, source.graph, source.counts, pg, control, backend, dtype, build, log)

    def metrics(self) -> dict:
        """Columns for step and eval rows: the prediction for the strategy in use and the decision."""
        return {"predicted_step_time_s": self.decision.predicted_step_time_s, "agp_decision": self.decision.label()}

    def write_events(self, metrics, engine) -> None:
        """Writes pending decision/switch rows (kind "agp") to the metrics file and TensorBoard
        (scalars through the metrics writer, the reasons as TensorBoard text); rank 0 only writes."""
        events, self.events = self.events, []
        for event in events:
            row = {**event, "step": engine.global_steps, "strategy_index": CANDIDATES.index(event["strategy"])}
            metrics.write(row)
            writer = getattr(getattr(engine.monitor, "tb_monitor", None), "summary_writer", None)
            if self.pg.rank == 0 and writer is not None:
                text = f"**{event['event']}**: {event['agp_decision']}\n\n" + "\n".join(f"- {r}" for r in event.get("reasons", []))
                writer.add_text("dsgraph/agp/decision", text, engine.global_steps)
                writer.flush()
