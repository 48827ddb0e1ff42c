"""The pick among predicted (strategy, p) pairs, with the reasons a person can check."""

from __future__ import annotations

from dataclasses import dataclass, field

from dsgraph.agp.model import Prediction

SWITCH_GAIN = 0.2  # switch strategies mid-run only when the other is predicted >= 20% faster


@dataclass(frozen=True, slots=True)
class Choice:
    best: Prediction
    ranked: list[Prediction]
    """Feasible candidates, fastest first."""
    rejected: list[Prediction] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: the pick and its runner-up."""
        return self.reasons[0] if self.reasons else f"{self.best.strategy} on {self.best.p} ranks"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def choose(predictions: list[Prediction], world_size: int | None = None) -> Choice:
    """The fastest feasible prediction (at ``world_size`` ranks when given, else over every p).

    Ties keep the earlier entry (fewer ranks, then the strategy order ag, a2a, halo). ValueError when
    nothing is feasible, listing why each candidate was rejected.
    """
    pool = [x for x in predictions if world_size is None or x.p == world_size]
    if not pool:
        covered = sorted({x.p for x in predictions})
        raise ValueError(f"no prediction for {world_size} ranks (predicted rank counts: {covered})")
    rejected = [x for x in pool if not x.feasible]
    ranked = sorted((x for x in pool if x.feasible), key=lambda x: x.time_s)
    if not ranked:
        why = "; ".join(f"{x.strategy}@{x.p}: {x.reason}" for x in rejected)
        raise ValueError(f"no feasible graph-parallel strategy: {why}")
    best = ranked[0]
    reasons = [
        f"pick {best.strategy} on {best.p} ranks: predicted {_ms(best.time_s)} per iteration, "
        f"{best.memory_bytes / 2**20:.1f} MiB per rank"
    ]
    for other in ranked[1:4]:
        reasons.append(
            f"{other.strategy} on {other.p} ranks: {_ms(other.time_s)} ({(other.time_s / best.time_s - 1) * 100:+.0f}%)"
        )
    if best.comm_s > best.attention_s + best.rest_s:
        reasons.append("communication dominates the pick's time")
    for x in rejected:
        reasons.append(f"rejected {x.strategy} on {x.p} ranks: {x.reason}")
    return Choice(best, ranked, rejected, reasons)


def switch_target(current: str, predictions: list[Prediction], p: int, gain: float = SWITCH_GAIN) -> Prediction | None:
    """The strategy to switch to at ``p`` ranks: the fastest feasible one whose predicted time is at
    most ``(1 - gain)`` times the current strategy's; None to stay."""
    here = [x for x in predictions if x.p == p and x.feasible]
    now = next((x for x in here if x.strategy == current), None)
    if now is None or not here:
        return None
    fastest = min(here, key=lambda x: x.time_s)
    if fastest.strategy != current and fastest.time_s <= (1.0 - gain) * now.time_s:
        return fastest
    return None
