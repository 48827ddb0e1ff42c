"""The collectives' latency-plus-bandwidth model: it recovers a stated latency and bandwidth, beats a
log-log line on a flat-then-linear curve (loopback gloo's shape), keeps both terms >= 0, and
round-trips through a profile file beside the log-log fits of older profiles."""

import json
import math

import pytest

from dsgraph.agp.fits import LatencyBandwidthFit, LogLogFit, fit_from_dict, fit_latency_bandwidth, fit_loglog
from dsgraph.agp.profile import load_profile
from dsgraph.agp.profile_cli import format_fits
from dsgraph.agp.synthetic import linear_profile

SIZES = [2.0**e for e in range(10, 23, 2)]


def test_recovers_latency_and_bandwidth():
    fit = fit_latency_bandwidth([(x, 50e-6 + x / 2e9) for x in SIZES])
    assert fit.latency_s == pytest.approx(50e-6, rel=1e-9)
    assert fit.s_per_byte == pytest.approx(1 / 2e9, rel=1e-9)
    assert fit.r2 == pytest.approx(1.0)
    assert fit(0) == 0.0 and fit(2**20) == pytest.approx(50e-6 + 2**20 / 2e9)


def test_beats_a_power_law_where_latency_dominates_small_messages():
    # flat at 300 us up to ~256 KiB, then 1 GB/s: the shape of the 2-core machine's collectives
    points = [(x, 300e-6 + x / 1e9) for x in SIZES]
    lb, ll = fit_latency_bandwidth(points), fit_loglog(points)
    assert lb.r2 > 0.999 > ll.r2
    worst = max(abs(lb(x) - t) / t for x, t in points)
    worst_ll = max(abs(ll(x) - t) / t for x, t in points)
    assert worst < 1e-9 and worst_ll > 0.2


def test_terms_never_negative():
    # times falling with size (noise at small sizes): the best fit with a zero per-byte term
    fit = fit_latency_bandwidth([(1e3, 3e-4), (1e4, 2e-4), (1e5, 1e-4)])
    assert fit.latency_s > 0 and fit.s_per_byte == 0.0
    fit = fit_latency_bandwidth([(1e3, 1e-6), (1e6, 1e-3), (1e7, 1e-2)])
    assert fit.latency_s == 0.0 and fit.s_per_byte == pytest.approx(1e-9, rel=1e-6)
    with pytest.raises(ValueError, match="at least two points"):
        fit_latency_bandwidth([(8.0, 1.0), (8.0, 2.0)])


def test_fit_from_dict_reads_both_models_and_names_a_bad_one():
    lb = fit_latency_bandwidth([(x, 1e-4 + x / 1e9) for x in SIZES])
    assert fit_from_dict(lb.to_dict(), "w") == lb
    ll = fit_loglog([(x, 1e-9 * x) for x in SIZES])
    assert isinstance(fit_from_dict(ll.to_dict(), "w"), LogLogFit)
    with pytest.raises(ValueError, match="w: unknown fit model 'cubic'"):
        fit_from_dict({"model": "cubic"}, "w")
    with pytest.raises(ValueError, match="w: latency_s and s_per_byte must be finite and >= 0"):
        fit_from_dict({**lb.to_dict(), "latency_s": -1.0}, "w")
    assert lb.scaled(2.0)(2**20) == pytest.approx(2 * lb(2**20))


def test_profile_with_latency_bandwidth_collectives_round_trips(tmp_path):
    profile = linear_profile(
        max_ranks=2,
        attention_s_per_edge_head=1e-9,
        rest_s_per_mac=1e-11,
        collective_s_per_byte=dict.fromkeys(("all_gather", "reduce_scatter", "all_to_all", "all_to_all_uneven"), 1e-9),
    )
    data = profile.to_dict()
    lb = fit_latency_bandwidth([(x, 2e-4 + x / 1e9) for x in SIZES])
    data["ranks"]["2"]["collectives"] = {c: lb.to_dict() for c in data["ranks"]["2"]["collectives"]}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    loaded = load_profile(str(path))
    fit = loaded.ranks[2].collectives["all_gather"]
    assert isinstance(fit, LatencyBandwidthFit) and fit(2**20) == pytest.approx(lb(2**20))
    assert isinstance(loaded.ranks[2].attention, LogLogFit)
    table = format_fits(loaded)
    assert "200 us + 1.00 GB/s" in table and math.isfinite(fit.r2)
