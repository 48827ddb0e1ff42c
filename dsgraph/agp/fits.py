"""Log-log least-squares lines: ``t(x) = exp(log_a) * x**slope`` fitted to (x, t) points.

Used for the attention time against edge-heads, the rest of a layer against node-MACs and each
collective's time against its message size in bytes. R^2 is computed in log space (the space the
line is fitted in).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LogLogFit:
    """A fitted line in log-log space and the points it was fitted to."""

    log_a: float
    """Intercept: log of the time (s) at x = 1."""
    slope: float
    """Exponent of x (1.0 means time proportional to x)."""
    r2: float
    """Coefficient of determination of the fit, in log space."""
    points: tuple[tuple[float, float], ...] = ()
    """The measured (x, seconds) pairs."""

    def __call__(self, x: float) -> float:
        """Predicted seconds at size ``x`` (0 for x <= 0)."""
        if x <= 0:
            return 0.0
        return math.exp(self.log_a + self.slope * math.log(x))

    def to_dict(self) -> dict:
        return {"log_a": self.log_a, "slope": self.slope, "r2": self.r2, "points": [list(p) for p in self.points]}

    @classmethod
    def from_dict(cls, d: dict, where: str) -> LogLogFit:
        """Reads a fit written by ``to_dict``; ``where`` names it in error messages."""
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object with log_a, slope, r2, got {type(d).__name__}")
        try:
            log_a, slope, r2 = float(d["log_a"]), float(d["slope"]), float(d["r2"])
            points = tuple((float(x), float(t)) for x, t in d.get("points", []))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(
                f"{where}: malformed fit ({err!r}); expected log_a, slope, r2 and [[x, t], ...] points"
            ) from None
        if not all(math.isfinite(v) for v in (log_a, slope, r2)):
            raise ValueError(f"{where}: log_a, slope and r2 must be finite numbers")
        return cls(log_a, slope, r2, points)

    def scaled(self, factor: float) -> LogLogFit:
        """The same line with every time multiplied by ``factor`` (> 0)."""
        return LogLogFit(self.log_a + math.log(factor), self.slope, self.r2, self.points)


def fit_loglog(points: list[tuple[float, float]]) -> LogLogFit:
    """Least-squares line through (log x, log t). Needs two or more points with distinct x > 0, t > 0."""
    pts = [(float(x), float(t)) for x, t in points if x > 0 and t > 0]
    if len({x for x, _ in pts}) < 2:
        raise ValueError(f"a log-log fit needs at least two points with distinct positive sizes, got {points}")
    lx = [math.log(x) for x, _ in pts]
    lt = [math.log(t) for _, t in pts]
    mx, mt = sum(lx) / len(lx), sum(lt) / len(lt)
    sxx = sum((a - mx) ** 2 for a in lx)
    sxt = sum((a - mx) * (b - mt) for a, b in zip(lx, lt))
    slope = sxt / sxx
    log_a = mt - slope * mx
    ss_res = sum((b - (log_a + slope * a)) ** 2 for a, b in zip(lx, lt))
    ss_tot = sum((b - mt) ** 2 for b in lt)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return LogLogFit(log_a, slope, r2, tuple(pts))
