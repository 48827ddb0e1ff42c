"""The AGP decision in training: one pick agreed by every rank, recalibrated from measured steps,
and a switch between strategies between steps when another is predicted >= 20% faster.

Rank 0 predicts every candidate (``auto_candidates()`` of the registry) at the job's world size
from the profile and broadcasts the decision through the control plane (mpi4py or torch object
collectives). All candidates use the run's contiguous row split, so a switch moves no data: a
strategy is only a callable on the rank's rows. When the profile is missing, malformed, from
another backend or dtype, or does not cover the world size, training falls back to ``FALLBACK``
and says why.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from dsgraph.agp.choose import SWITCH_GAIN, choose
from dsgraph.agp.model import Calibration, Prediction, predict
from dsgraph.agp.profile import load_profile
from dsgraph.graph.partition import partition_quality
from dsgraph.parallel import auto_candidates
from dsgraph.parallel.shapes import GraphShape, ModelShape, SplitShape

FALLBACK = "ag"  # works for every head count and node order


def contiguous_shape(structure, counts: list[int]) -> GraphShape:
    """N, E, and the edges and halo of each range of the run's row split (``structure`` has
    rowptr, col and num_edges: a Graph or a Csr); the same split serves every candidate."""
    import numpy as np

    starts = np.concatenate([[0], np.cumsum(counts)])
    split = SplitShape.from_quality(partition_quality(structure, np.stack([starts[:-1], starts[1:]], axis=1)))
    p = len(counts)
    return GraphShape(int(starts[-1]), structure.num_edges, rows={p: split}, partitions={p: split})


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


def plan_decision(
    profile_path: str | None,
    shape: GraphShape,
    model: ModelShape,
    world: int,
    backend: str,
    dtype: str,
    calibration=Calibration(),
    measured=None,
) -> tuple[Decision, list[Prediction]]:
    """Rank 0's decision at ``world`` ranks from the profile at ``profile_path``. Raises
    ValueError/FileNotFoundError on a missing or bad profile."""
    if not profile_path:
        raise ValueError('"strategy": "auto" needs \'agp.profile\' (a JSON from `dsgraph profile`)')
    profile = load_profile(profile_path)
    profile.check_matches(backend, dtype)
    if world not in profile.ranks:
        raise ValueError(
            f"{profile_path}: the profile covers rank counts {sorted(profile.ranks)}, not the world size {world}"
        )
    preds = [predict(s, world, shape, model, profile, calibration=calibration) for s in auto_candidates()]
    if measured:  # strategies already run: their measured time replaces the prediction
        preds = [_with_time(x, measured[x.strategy]) if x.strategy in measured and x.feasible else x for x in preds]
    choice = choose(preds, world_size=world)
    return Decision(choice.best.strategy, choice.best.time_s, choice.reasons, [x.as_dict() for x in preds]), preds


def _with_time(x: Prediction, seconds: float) -> Prediction:
    d = x.as_dict()
    d.update(time_s=seconds, reason="measured")
    return Prediction(**d)


class AutoStrategy:
    """Which strategy ``auto`` runs, and the recalibration that may change it.

    Every method is collective (all ranks call it at the same step); ``events`` collects metrics
    rows (kind "agp") for the training loop to write."""

    def __init__(
        self,
        profile_path: str | None,
        recalibrate_after: int,
        shape: GraphShape,
        model: ModelShape,
        pg,
        control,
        backend: str,
        dtype: str,
        log=print,
    ):
        """``recalibrate_after``: measured steps (after a warm-up step) before rank 0 recalibrates
        the model and may switch (0: never)."""
        self.profile_path, self.recalibrate_after = profile_path, recalibrate_after
        self.shape, self.model, self.pg, self.control = shape, model, pg, control
        self.backend, self.dtype, self.log = backend, dtype, log
        self.events: list[dict] = []
        self.samples: list[tuple[float, float]] = []  # (step s, comm s) of the current strategy
        self.measured: dict[str, float] = {}  # strategy -> measured median step time (each is measured once)
        decision = None
        if pg.rank == 0:
            try:
                decision, _ = self._plan()
            except (ValueError, FileNotFoundError) as err:
                decision = Decision(FALLBACK, None, [str(err)], fallback=True)
        self._adopt(control.bcast(decision), event="decision")

    @property
    def current(self) -> str:
        return self.decision.strategy

    def _plan(self, calibration=Calibration(), measured=None):
        return plan_decision(
            self.profile_path,
            self.shape,
            self.model,
            self.pg.world_size,
            self.backend,
            self.dtype,
            calibration,
            measured,
        )

    def _adopt(self, decision: Decision, event: str, measured_s: float | None = None) -> None:
        self.decision = decision
        self.samples = []
        self.events.append(
            {
                "kind": "agp",
                "event": event,
                "step": None,
                "strategy": decision.strategy,
                "predicted_step_time_s": decision.predicted_step_time_s,
                "measured_step_time_s": measured_s,
                "fallback": decision.fallback,
                "agp_decision": decision.label(),
                "reasons": decision.reasons,
                "table": decision.table,
            }
        )
        if self.pg.rank == 0:
            self.log(f"agp: {event}: {decision.label()}")

    def switch_to(self, name: str, reason: str) -> None:
        """Uses strategy ``name`` from the next step on (collective; results stay the same)."""
        self._adopt(Decision(name, None, [reason], self.decision.table), event="switch")

    def after_step(self, step_s: float, comm_s: float) -> None:
        """Records a measured step; after ``recalibrate_after`` steps (the first step of a
        strategy is a warm-up and not counted) rank 0 recalibrates and all ranks adopt its verdict."""
        self.samples.append((step_s, comm_s))
        after = self.recalibrate_after
        if self.decision.fallback or after <= 0 or self.current in self.measured or len(self.samples) < after + 1:
            return
        steady = self.samples[1:]
        step_med = statistics.median(s for s, _ in steady)
        comm_med = statistics.median(c for _, c in steady)
        self.measured[self.current] = step_med
        verdict = self._recalibrated(step_med, comm_med) if self.pg.rank == 0 else None
        verdict = self.control.bcast(verdict)
        if verdict is not None:
            self._adopt(verdict, event="switch", measured_s=step_med)
        else:
            self.events.append(
                {
                    "kind": "agp",
                    "event": "recalibrated",
                    "step": None,
                    "strategy": self.current,
                    "predicted_step_time_s": self.decision.predicted_step_time_s,
                    "measured_step_time_s": step_med,
                    "agp_decision": self.decision.label(),
                }
            )

    def _recalibrated(self, step_med: float, comm_med: float) -> Decision | None:
        """Rank 0: fit comm scale and overhead to the measured steps, re-predict; a Decision to
        switch when another strategy is predicted at least SWITCH_GAIN faster, else None."""
        _, base = self._plan()
        now = next(x for x in base if x.strategy == self.current)
        comm_scale = comm_med / now.comm_s if now.comm_s > 0 and comm_med > 0 else 1.0
        overhead = (step_med - comm_med) - (now.time_s - now.comm_s)
        decision, preds = self._plan(
            Calibration(comm_scale={self.current: comm_scale}, overhead_s=overhead), self.measured
        )
        here = next(x for x in preds if x.strategy == self.current)
        best = min((x for x in preds if x.feasible), key=lambda x: x.time_s)
        if best.strategy != self.current and best.time_s <= (1.0 - SWITCH_GAIN) * here.time_s:
            decision.reasons.insert(
                0,
                f"recalibrated (comm x{comm_scale:.2f}, overhead {overhead * 1e3:+.1f} ms): "
                f"{best.strategy} {best.time_s * 1e3:.1f} ms vs {self.current} measured {step_med * 1e3:.1f} ms",
            )
            return decision
        self.decision.predicted_step_time_s = here.time_s
        return None

    def metrics(self) -> dict:
        """Columns for step and eval rows: the prediction for the strategy in use and the decision."""
        return {"predicted_step_time_s": self.decision.predicted_step_time_s, "agp_decision": self.decision.label()}
