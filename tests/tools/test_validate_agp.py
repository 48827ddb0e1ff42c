"""The AGP validation sweep's judging (medians, noise, distinguishable configurations, the oracle,
time and memory errors), its raw file and resume order, and its peak-memory probe."""

import pytest
import torch

from tools.reports import agp_sweep_eval as ev
from tools.reports.agp_sweep_ranks import PeakProbe
from tools.reports.validate_agp import configs, load_raw, save_raw, units


def _pair(pred, times, peaks=(1.0, 1.0, 1.0), pred_mem=1.0):
    return {"predicted_s": pred, "times": list(times), "peaks": list(peaks), "predicted_transient_bytes": pred_mem}


def test_clear_winner_is_distinguishable_and_a_wrong_pick_misses():
    pairs = {
        ("ag", 1): _pair(1.0, (1.00, 1.02, 0.98)),
        ("a2a", 1): _pair(1.0, (1.00, 1.02, 0.98)),  # p = 1 stands for GP-AG's measurement
        ("ag", 2): _pair(0.9, (0.60, 0.61, 0.59)),
        ("halo", 2): _pair(0.5, (0.80, 0.82, 0.79)),
    }
    j = ev.judge(pairs, "ag")
    assert j["best"] == ("ag", 2) and j["second"] == ("halo", 2)
    assert j["pick"] == ("halo", 2) and not j["hit"]
    assert j["gap"] == pytest.approx(0.80 / 0.60 - 1)
    assert j["noise"] == pytest.approx(0.03 / 0.80)
    assert j["distinguishable"]


def test_close_call_within_noise_is_not_distinguishable_but_a_hit():
    pairs = {("ag", 1): _pair(1.0, (1.0, 1.3, 0.9)), ("ag", 2): _pair(0.9, (0.95, 1.25, 1.02))}
    j = ev.judge(pairs, "ag")
    assert j["best"] == ("ag", 1) and j["pick"] == ("ag", 2)
    assert j["hit"] and not j["distinguishable"]  # 2% apart, runs spread 30-40%


def test_pick_at_one_rank_is_judged_by_gp_ag():
    pairs = {("ag", 1): _pair(1.0, (1.0, 1.0)), ("halo", 1): _pair(0.1, (1.0, 1.0)), ("ag", 2): _pair(2, (3.0, 3.0))}
    j = ev.judge(pairs, "ag")
    assert j["pick"] == ("halo", 1) and j["best"] == ("ag", 1) and j["hit"]


def test_oracle_compares_every_ordered_pair_of_runs():
    # run 0 says a is best, runs 1 and 2 say b is best by far
    pairs = {("a", 2): _pair(1, (1.0, 2.0, 2.0)), ("b", 2): _pair(1, (1.5, 1.0, 1.0))}
    hits = ev.oracle_hits(pairs, "a", 3)
    assert len(hits) == 6
    assert sum(hits) == 2  # 1 vs 2 and 2 vs 1 agree; every comparison with run 0 misses


def test_errors_once_per_measured_pair_with_memory():
    pairs = {
        ("ag", 1): _pair(1.1, (1.0, 1.0, 1.0), peaks=(100, 100, 100), pred_mem=80),
        ("a2a", 1): _pair(1.1, (1.0, 1.0, 1.0)),
        ("ag", 2): _pair(0.5, (0.4, 0.5, 0.6), peaks=(50, 60, 70), pred_mem=66),
    }
    t_err, m_err = ev.errors(pairs, "ag")
    assert t_err == pytest.approx([0.1, 0.0]) and m_err == pytest.approx([0.2, 0.1])
    s = ev.summarise([ev.judge(pairs, "ag")], ev.oracle_hits(pairs, "ag", 3), t_err, m_err)
    assert s["median_abs_time_error_pct"] == pytest.approx(5.0) and s["median_abs_memory_error_pct"] == pytest.approx(
        15.0
    )


def test_transient_memory_leaves_out_what_was_resident():
    class P:
        memory_bytes = 100.0
        memory_terms = {"optimizer states": 10.0, "features": 5.0, "graph": 20.0, "activations": 65.0}

    assert ev.transient_bytes(P()) == 65.0


def test_units_are_round_robin_and_raw_files_resume(tmp_path):
    assert units(2) == [(0, 1), (0, 2), (0, 4), (1, 1), (1, 2), (1, 4)]
    cfgs = configs("quick")
    path = str(tmp_path / "raw.json")
    measured = {(0, 2, 1, "halo"): (0.5, 1e6, 3e8)}
    save_raw(path, "quick", cfgs, 3, measured, 12.0)
    assert load_raw(path, "quick", cfgs, 3) == (measured, 12.0)
    with pytest.raises(ValueError, match="measured for grid 'quick' with 3 runs, not 'scale' with 3"):
        load_raw(path, "scale", configs("scale"), 3)
    scale = configs("scale")
    assert len(scale) == 9 and min(c.scale for c in scale) == 16 and max(c.scale for c in scale) == 18


def test_peak_probe_sees_an_allocation():
    probe = PeakProbe()
    probe.start()
    base = probe.status_bytes("VmRSS")
    x = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
    del x
    assert probe.peak() - base >= 60 * 2**20
