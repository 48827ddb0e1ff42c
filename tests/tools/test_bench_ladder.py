"""The scale ladder's bookkeeping: the metrics it reads, the exponent it fits, a failed rung kept."""

import json

import pytest

from tools.benchmarks import bench_ladder


def test_the_median_step_leaves_out_the_first_and_the_forecast_gives_the_peaks(tmp_path):
    path = tmp_path / "m.jsonl"
    rows = [
        {"kind": "step", "epoch": 0, "step_time_s": 9.0},
        {"kind": "util", "epoch": 0, "cpu_util/rank0": 1.0},
        {"kind": "step", "epoch": 1, "step_time_s": 2.0},
        {"kind": "step", "epoch": 2, "step_time_s": 4.0},
        {"kind": "eval", "epoch": 2, "step_time_s": 0.5},
        {"kind": "forecast", "measured_peak_mem_mb_per_rank": [100.0, 120.0], "predicted_peak_mem_mb": 110.0},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    got = bench_ladder.read_metrics(path)
    assert got["median_step_s"] == 3.0 and got["step_times_s"] == [9.0, 2.0, 4.0]
    assert got["peak_mem_mb_per_rank"] == [100.0, 120.0] and got["predicted_peak_mem_mb"] == 110.0


def test_the_fit_recovers_the_exponent_and_the_growth_of_time_per_edge():
    rows = []
    for scale in (16, 17, 18, 19):
        edges = 16 * 2**scale
        step = 3e-8 * edges**1.1
        rows.append({"rung": f"rmat:{scale}", "edges": edges, "median_step_s": step, "ns_per_edge": step / edges * 1e9})
    rows.append({"rung": "rmat:20", "edges": 16 * 2**20, "exit_code": 1})  # failed: left out of the fit
    summary = bench_ladder.fit(rows)
    assert summary["exponent"] == pytest.approx(1.1)
    assert summary["per_edge_growth"] == pytest.approx(8**0.1) and summary["last"] == "rmat:19"
    assert bench_ladder.fit(rows[:1]) is None


def test_a_failed_rung_is_recorded_with_its_output_and_the_table_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_ladder, "build", lambda rung, fresh: ("graph.npz", 1.5))
    monkeypatch.setattr(bench_ladder, "directed_edges", lambda path: (256, 3000))
    note = "dsgraph: predicted peak 9 MB per rank is over the limit of 8 MB: activation checkpointing turned on"
    monkeypatch.setattr(bench_ladder, "train", lambda rung, args, metrics: (3, 7.0, f"{note}\nrank 1 died"))
    row = bench_ladder.run_rung("rmat:8", bench_ladder.parse_args(["--rungs", "rmat:8"]), tmp_path)
    assert row["exit_code"] == 3 and row["output_tail"].endswith("rank 1 died") and "median_step_s" not in row
    assert row["notes"] == [note]
    assert "| rmat:8 | 256 | 3,000 | 1.5 | failed (3) |" in bench_ladder.table([row], None)
