"""The run's predicted against measured step time and peak memory (``dsgraph/train/forecast.py``)."""

import pytest

from dsgraph.train.forecast import Forecast, describe


def _row(epoch, seconds, **predicted):
    return {"epoch": epoch, "step_time_s": seconds, **predicted}


def test_median_after_the_warm_up_step_and_signed_errors():
    f = Forecast()
    for epoch, seconds in enumerate([9.0, 0.10, 0.30, 0.20]):  # the first step compiles
        f.add(_row(epoch, seconds, predicted_step_time_s=0.25, predicted_peak_mem_mb=900.0))
    row = f.row([1000.0, 1200.0])
    assert row["kind"] == "forecast" and row["epoch"] == 3
    assert row["measured_step_time_s"] == pytest.approx(0.20) and row["measured_steps"] == 3
    assert row["step_time_error"] == pytest.approx(0.25)
    assert row["measured_peak_mem_mb"] == 1200.0 and row["peak_mem_error"] == pytest.approx(-0.25)
    line = describe(row)
    assert "step time predicted 250.0 ms, measured 200.0 ms (median of 3; +25%)" in line
    assert "peak memory predicted 900 MB per rank, measured 1,200 MB (largest rank; -25%)" in line


def test_nothing_predicted_or_no_step_gives_no_row_and_one_side_alone_is_reported():
    f = Forecast()
    assert f.row([1.0]) is None
    f.add(_row(0, 0.5))
    assert f.row([1.0]) is None
    f.add(_row(1, 0.5, predicted_peak_mem_mb=2.0))
    row = f.row([1.0])
    assert row["step_time_error"] is None and row["peak_mem_error"] == pytest.approx(1.0)
    assert "step time" not in describe(row)
