"""The attention kernel's fit: ``AttentionFit`` (a * edges + b * edge-heads + c * row-heads + e) on
synthetic points, the graphs it is measured on, old log-log profiles still loading, and the model
reading each strategy's kernel call (GP-A2A: all N rows at H / p heads)."""

import pytest

from dsgraph.agp.fits import AttentionFit, LogLogFit, attention_from_dict, attention_seconds, fit_attention
from dsgraph.agp.measure import ATTENTION_DEGREE, CPU_SIZES, SHAPE_DEGREE, _attention_cases
from dsgraph.agp.model import GraphShape, ModelShape, predict
from dsgraph.agp.profile import profile_from_dict
from dsgraph.agp.synthetic import linear_profile

COEFFICIENTS = (200e-9, 6e-9, 40e-9, 1e-4)  # per edge, per edge-head, per row-head, per call
KNEE = 16.0
PER_BYTE = {"all_gather": 1e-9, "reduce_scatter": 1e-9, "all_to_all": 1e-9, "all_to_all_uneven": 1e-9}


def call_point(n, degree, heads, coefficients=COEFFICIENTS):
    a, b, c, e = coefficients
    edges = n * degree
    return edges, edges * heads, n * heads, a * edges + b * edges * heads + c * n * heads + e


def measured_shapes(heads=8):
    """(n, degree, heads) of the kernel calls a CPU profile measures (``_attention_cases``)."""
    sizes = CPU_SIZES.attention_nodes
    return (
        [(n, ATTENTION_DEGREE, heads) for n in sizes]
        + [(n, SHAPE_DEGREE, heads) for n in sizes[-3:]]
        + [(n, ATTENTION_DEGREE, heads // 4) for n in sizes[-3:]]
    )


def test_fit_recovers_the_four_terms_from_the_measured_graphs():
    fit = fit_attention([call_point(*s) for s in measured_shapes()])
    got = (fit.s_per_edge, fit.s_per_edge_head, fit.s_per_row_head, fit.s_per_call)
    assert got == pytest.approx(COEFFICIENTS, rel=1e-6)
    assert fit.r2 == pytest.approx(1.0)
    rmat = call_point(262_144, 9, 4)  # an R-MAT-like call outside the measured shapes
    assert fit(*rmat[:3]) == pytest.approx(rmat[3], rel=1e-6)


def test_one_power_of_edge_heads_cannot_follow_the_heads():
    """Halving the heads at the same edges halves the edge-heads; a per-edge cost keeps most of the
    time, which the new fit follows and a log-log line of edge-heads does not."""
    points = [call_point(*s) for s in measured_shapes()]
    fit, line = (
        fit_attention(points),
        LogLogFit.from_dict({"log_a": -20.0, "slope": 1.0, "r2": 1.0, "points": []}, "line"),
    )
    eight, four = call_point(131_072, 16, 8), call_point(131_072, 16, 4)
    assert four[3] / eight[3] > 0.6
    assert fit(*four[:3]) / fit(*eight[:3]) == pytest.approx(four[3] / eight[3], rel=1e-6)
    assert line(four[1]) / line(eight[1]) == pytest.approx(0.5)


def test_fit_needs_two_degrees_and_two_head_counts():
    one_degree = [call_point(n, 16, h) for n in (512, 2048, 8192) for h in (2, 8)]
    with pytest.raises(ValueError, match="two or more degrees and head counts"):
        fit_attention(one_degree)  # edges and row-heads in one proportion
    with pytest.raises(ValueError, match="two or more degrees and head counts"):
        fit_attention([call_point(512, 4, 8), call_point(512, 16, 8), call_point(2048, 16, 2)])


def test_round_trip_malformed_and_old_loglog():
    fit = fit_attention([call_point(*s) for s in measured_shapes()])
    again = attention_from_dict(fit.to_dict(), "here")
    assert again == fit and isinstance(again, AttentionFit)
    with pytest.raises(ValueError, match="here: s_per_edge, s_per_edge_head, s_per_row_head, s_per_call must be"):
        attention_from_dict({**fit.to_dict(), "s_per_edge": -1.0}, "here")
    with pytest.raises(ValueError, match="here: malformed attention fit"):
        attention_from_dict({**fit.to_dict(), "points": [[1.0, 2.0, 3.0]]}, "here")
    with pytest.raises(ValueError, match="unknown attention fit model 'cubic'"):
        attention_from_dict({**fit.to_dict(), "model": "cubic"}, "here")
    assert fit.scaled(2.0)(1e6, 8e6, 1e5) == pytest.approx(2 * fit(1e6, 8e6, 1e5))
    line = attention_from_dict({"log_a": -20.0, "slope": 1.0, "r2": 1.0, "points": []}, "old")
    assert isinstance(line, LogLogFit)
    assert attention_seconds(line, 1e6, 8e6, 1e5) == line(8e6)  # an old profile reads the edge-heads alone


def test_profile_measures_two_degrees_and_two_head_counts():
    import torch

    cases = _attention_cases(0, 8, 16, torch.float32, "reference", torch.device("meta"))
    shapes = {(e / (rh / h), h) for _, (e, eh, rh), _ in cases for h in [eh / e]}
    assert {d for d, _ in shapes} == {ATTENTION_DEGREE, SHAPE_DEGREE}
    assert {h for _, h in shapes} == {8, 2}
    doubled = _attention_cases(0, 8, 32, torch.float32, "reference", torch.device("meta"), "attention_2d")
    assert [x for _, x, _ in doubled] == [x for _, x, _ in cases[: len(doubled)]]  # head_dim_knee pairs these


def _profile_with(fit: AttentionFit):
    profile = linear_profile(
        max_ranks=4, attention_s_per_edge_head=1e-9, rest_s_per_mac=1e-12, collective_s_per_byte=PER_BYTE
    )
    data = profile.to_dict()
    for entry in data["ranks"].values():
        entry["attention"] = fit.to_dict()
        entry["head_dim_knee"] = KNEE
    return profile_from_dict(data)


def test_model_reads_each_strategys_kernel_call():
    """GP-AG's busiest rank runs its own rows at all H heads; GP-A2A's runs all N rows at H / p."""
    fit = AttentionFit(*COEFFICIENTS, 1.0)
    profile = _profile_with(fit)
    n, e, heads, p = 40_000, 600_000, 8, 4
    graph, model = GraphShape(num_nodes=n, num_edges=e), ModelShape(layers=1, hidden=128, heads=heads)
    a2a = predict("a2a", p, graph, model, profile, step=False)
    assert a2a.attention_s == pytest.approx(fit(e, e * heads / p, n * heads / p))
    one = predict("ag", 1, graph, model, profile, step=False)
    assert one.attention_s == pytest.approx(fit(e, e * heads, n * heads))
    # head dim 32 against the profile's 16: the knee, a ratio of whole calls, scales the whole call
    wide = predict("ag", 1, graph, ModelShape(layers=1, hidden=256, heads=heads), profile, step=False)
    assert wide.attention_s == pytest.approx((KNEE + 32) / (KNEE + 16) * one.attention_s)


def test_shipped_cpu_profile_has_the_attention_fit():
    import os

    from dsgraph.agp.profile import load_profile

    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "agp", "cpu_profile.json")
    for p, fits in load_profile(path).ranks.items():
        assert isinstance(fits.attention, AttentionFit), p
        assert len(fits.attention.points) == len(measured_shapes()) and fits.attention.r2 > 0.9
