"""The ``forecast`` row: predicted against measured, and the measured figures alone when nothing was
predicted (sampled and isolated runs still record every rank's peak)."""

import pytest

from dsgraph.train.forecast import Forecast, describe


def test_nothing_predicted_still_gives_every_ranks_peak():
    forecast = Forecast()
    assert forecast.row([100.0]) is None  # no step taken
    for seconds in (9.0, 2.0, 4.0):
        forecast.add({"epoch": 0, "step_time_s": seconds})
    row = forecast.row([6214.6, 6054.0])
    assert row["measured_step_time_s"] == 3.0 and row["measured_steps"] == 2  # the first step left out
    assert row["measured_peak_mem_mb"] == 6214.6 and row["measured_peak_mem_mb_per_rank"] == [6214.6, 6054.0]
    assert row["predicted_peak_mem_mb"] is None and row["peak_mem_error"] is None and row["step_time_error"] is None
    assert describe(row) == (
        "measured: step time 3000.0 ms (median of 2), peak memory per rank 6,215 / 6,054 MB (nothing predicted for "
        "this run)"
    )


def test_predicted_peak_gives_its_signed_error():
    forecast = Forecast()
    for seconds in (1.0, 2.0):
        forecast.add({"epoch": 1, "step_time_s": seconds, "predicted_peak_mem_mb": 110.0})
    row = forecast.row([100.0, 90.0])
    assert row["peak_mem_error"] == pytest.approx(0.1) and row["step_time_error"] is None
    assert describe(row).startswith("predicted vs measured: peak memory predicted 110 MB per rank, measured 100 MB")
