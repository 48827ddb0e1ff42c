"""The run's predictions against what it measured: AGP's step time (a launch plan, a profile, or the
``auto`` strategy's decision) and the memory model's peak per rank, beside the median measured step
and the largest peak over the ranks. The trainer writes the comparison as a ``kind: "forecast"``
metrics row at the end of the run and rank 0 logs it; every step row already carries both figures.
A run that predicted nothing (sampled and isolated modes) still gets the row, with its measured
figures (every rank's peak) and null predictions."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

WARM_UP_STEPS = 1
"""Steps left out of the measured median: the first compiles kernels and fills caches."""


@dataclass
class Forecast:
    """Collects each step row's measured and predicted figures (rank 0's rows; peaks per rank at the end)."""

    steps: list[float] = field(default_factory=list)
    epoch: int = 0
    predicted_step: float | None = None
    predicted_peak: float | None = None

    def add(self, row: dict) -> None:
        self.steps.append(row["step_time_s"])
        self.epoch = row["epoch"]
        self.predicted_step = row.get("predicted_step_time_s", self.predicted_step)
        self.predicted_peak = row.get("predicted_peak_mem_mb", self.predicted_peak)

    def row(self, peaks_mb: list[float]) -> dict | None:
        """The ``forecast`` metrics row (errors signed: predicted / measured - 1; null where nothing was
        predicted), or None when the run took no step."""
        if not self.steps:
            return None
        steady = self.steps[WARM_UP_STEPS:] or self.steps
        measured_step = statistics.median(steady)
        measured_peak = max(peaks_mb)
        row = {
            "kind": "forecast",
            "epoch": self.epoch,
            "predicted_step_time_s": self.predicted_step,
            "measured_step_time_s": measured_step,
            "measured_steps": len(steady),
            "predicted_peak_mem_mb": self.predicted_peak,
            "measured_peak_mem_mb": measured_peak,
            "measured_peak_mem_mb_per_rank": peaks_mb,
        }
        row["step_time_error"] = _error(self.predicted_step, measured_step)
        row["peak_mem_error"] = _error(self.predicted_peak, measured_peak)
        return row


def _error(predicted: float | None, measured: float) -> float | None:
    return None if predicted is None or measured <= 0 else predicted / measured - 1.0


def describe(row: dict) -> str:
    """rank 0's closing line for a ``forecast`` row."""
    parts = []
    if row["predicted_step_time_s"] is not None:
        parts.append(
            f"step time predicted {row['predicted_step_time_s'] * 1e3:.1f} ms, measured "
            f"{row['measured_step_time_s'] * 1e3:.1f} ms (median of {row['measured_steps']}; "
            f"{row['step_time_error'] * 100:+.0f}%)"
        )
    if row["predicted_peak_mem_mb"] is not None:
        parts.append(
            f"peak memory predicted {row['predicted_peak_mem_mb']:,.0f} MB per rank, measured "
            f"{row['measured_peak_mem_mb']:,.0f} MB (largest rank; {row['peak_mem_error'] * 100:+.0f}%)"
        )
    if not parts:
        peaks = " / ".join(f"{mb:,.0f}" for mb in row["measured_peak_mem_mb_per_rank"])
        return (
            f"measured: step time {row['measured_step_time_s'] * 1e3:.1f} ms (median of {row['measured_steps']}), "
            f"peak memory per rank {peaks} MB (nothing predicted for this run)"
        )
    return "predicted vs measured: " + "; ".join(parts)
