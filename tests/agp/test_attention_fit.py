"""The attention kernel's fit: ``AttentionFit`` (a * edges + (b + m * miss) * edge-heads + c * row-heads
+ s * source row-heads + e, miss the share of K/V reads past the cache) on synthetic points, the
graphs it is measured on, old profiles still loading, and the model reading each strategy's kernel
calls (GP-A2A: all N rows at H / p heads; GP-AG: sources of all ranks; the ring: one call per block)."""

import pytest

from dsgraph.agp.fits import (
    AttentionFit,
    LogLogFit,
    attention_from_dict,
    attention_seconds,
    fit_attention,
    miss_share,
)
from dsgraph.agp.measure import ATTENTION_DEGREE, CPU_SIZES, SHAPE_DEGREE, _attention_cases
from dsgraph.agp.model import GraphShape, ModelShape, SplitShape, predict
from dsgraph.agp.profile import profile_from_dict
from dsgraph.agp.synthetic import linear_profile

# per edge, per edge-head, per missed edge-head, per row-head, per source row-head, per call
COEFFICIENTS = (200e-9, 6e-9, 30e-9, 40e-9, 20e-9, 1e-4)
CACHE = 2.0**17  # source row-heads (a power of 2: one of fit_attention's candidates)
KNEE = 16.0
PER_BYTE = {"all_gather": 1e-9, "reduce_scatter": 1e-9, "all_to_all": 1e-9, "all_to_all_uneven": 1e-9}


def call_point(n, degree, heads, sources=None, coefficients=COEFFICIENTS, cache=CACHE):
    a, b, m, c, s, e = coefficients
    edges, source_heads = n * degree, (sources or n) * heads
    missed = miss_share(source_heads, cache)
    seconds = a * edges + (b + m * missed) * edges * heads + c * n * heads + s * source_heads + e
    return edges, edges * heads, n * heads, source_heads, seconds


def measured_shapes(heads=8):
    """(n, degree, heads, sources) of the kernel calls a CPU profile measures (``_attention_cases``)."""
    sizes = CPU_SIZES.attention_nodes
    n, sources = CPU_SIZES.source_case
    return (
        [(n, ATTENTION_DEGREE, heads, n) for n in sizes]
        + [(n, SHAPE_DEGREE, heads, n) for n in sizes[-3:]]
        + [(n, ATTENTION_DEGREE, heads // 4, n) for n in sizes[-3:]]
        + [(n, ATTENTION_DEGREE, heads, s) for s in sources]
    )


def test_fit_recovers_every_term_and_the_cache_from_the_measured_graphs():
    fit = fit_attention([call_point(*s) for s in measured_shapes()])
    got = tuple(getattr(fit, k) for k in AttentionFit.KEYS)
    assert got == pytest.approx(COEFFICIENTS, rel=1e-6)
    assert fit.cache_row_heads == CACHE and fit.r2 == pytest.approx(1.0)
    rmat = call_point(131_072, 9, 4, sources=262_144)  # an R-MAT-like call outside the measured shapes
    assert fit(*rmat[:4]) == pytest.approx(rmat[4], rel=1e-6)


def test_reads_past_the_cache_cost_more_per_edge():
    """The same edges from more source rows: each edge-head costs more once the sources' K/V outgrow
    the cache, and not at all more while they fit."""
    fit = fit_attention([call_point(*s) for s in measured_shapes()])
    fits_in, twice, far = (fit(*call_point(16_384, 16, 8, s)[:4]) for s in (2**12, 2**13, 2**20))
    per_source = COEFFICIENTS[4] * 8
    assert twice - fits_in == pytest.approx(per_source * 2**12, rel=1e-6)  # 2^16 source row-heads: in the cache
    assert far - twice > per_source * (2**20 - 2**13)  # past it: the missed reads on top
    no_cache = [
        call_point(*s, cache=0.0, coefficients=(*COEFFICIENTS[:2], 0.0, *COEFFICIENTS[3:])) for s in measured_shapes()
    ]
    plain = fit_attention(no_cache)
    assert plain.s_per_missed_edge_head == pytest.approx(0.0, abs=1e-15)  # no cache invented


def test_one_power_of_edge_heads_cannot_follow_the_heads():
    """Halving the heads at the same edges halves the edge-heads; a per-edge cost keeps most of the
    time, which the new fit follows and a log-log line of edge-heads does not."""
    points = [call_point(*s) for s in measured_shapes()]
    fit, line = (
        fit_attention(points),
        LogLogFit.from_dict({"log_a": -20.0, "slope": 1.0, "r2": 1.0, "points": []}, "line"),
    )
    eight, four = call_point(131_072, 16, 8), call_point(131_072, 16, 4)
    assert four[4] / eight[4] > 0.6
    assert fit(*four[:4]) / fit(*eight[:4]) == pytest.approx(four[4] / eight[4], rel=1e-6)
    assert line(four[1]) / line(eight[1]) == pytest.approx(0.5)


def test_fit_needs_two_degrees_head_counts_and_source_counts():
    one_degree = [call_point(n, 16, h, s) for n in (512, 2048, 8192) for h in (2, 8) for s in (n, 4 * n)]
    with pytest.raises(ValueError, match="two or more degrees, head counts and source"):
        fit_attention(one_degree)  # edges and row-heads in one proportion
    own_sources = [call_point(n, d, h) for n in (512, 2048) for d in (4, 16) for h in (2, 8)]
    with pytest.raises(ValueError, match="two or more degrees, head counts and source"):
        fit_attention(own_sources)  # row-heads and source row-heads equal


def test_round_trip_malformed_and_old_loglog():
    fit = fit_attention([call_point(*s) for s in measured_shapes()])
    again = attention_from_dict(fit.to_dict(), "here")
    assert again == fit and isinstance(again, AttentionFit)
    with pytest.raises(ValueError, match="here: s_per_edge, .*, s_per_call and cache_row_heads must be finite"):
        attention_from_dict({**fit.to_dict(), "s_per_edge": -1.0}, "here")
    with pytest.raises(ValueError, match="here: malformed attention fit"):
        attention_from_dict({**fit.to_dict(), "points": [[1.0, 2.0, 3.0]]}, "here")
    with pytest.raises(ValueError, match="here: .* and cache_row_heads must be finite and >= 0"):
        attention_from_dict({**fit.to_dict(), "cache_row_heads": -1.0}, "here")
    with pytest.raises(ValueError, match="unknown attention fit model 'cubic'"):
        attention_from_dict({**fit.to_dict(), "model": "cubic"}, "here")
    assert fit.scaled(2.0)(1e6, 8e6, 1e5, 4e6) == pytest.approx(2 * fit(1e6, 8e6, 1e5, 4e6))
    assert fit.scaled(2.0).cache_row_heads == fit.cache_row_heads
    line = attention_from_dict({"log_a": -20.0, "slope": 1.0, "r2": 1.0, "points": []}, "old")
    assert isinstance(line, LogLogFit)
    assert attention_seconds(line, 1e6, 8e6, 1e5) == line(8e6)  # an old profile reads the edge-heads alone


def test_the_fit_of_2026_12_05_loads_without_cache_and_source_terms():
    old = {
        "model": "edges_heads_rows",
        **dict(zip(("s_per_edge", "s_per_edge_head", "s_per_row_head", "s_per_call"), (2e-7, 6e-9, 4e-8, 1e-4))),
        "r2": 0.98,
        "points": [[2048.0, 16384.0, 1024.0, 0.0017]],
    }
    fit = attention_from_dict(old, "old")
    assert (fit.s_per_missed_edge_head, fit.s_per_source_row_head, fit.cache_row_heads) == (0.0, 0.0, 0.0)
    assert fit.points == ((2048.0, 16384.0, 1024.0, 1024.0, 0.0017),)
    assert fit(1e6, 8e6, 1e5, 9e9) == pytest.approx(2e-7 * 1e6 + 6e-9 * 8e6 + 4e-8 * 1e5 + 1e-4)


def test_profile_measures_two_degrees_and_two_head_counts():
    import torch

    cases = _attention_cases(0, 8, 16, torch.float32, "reference", torch.device("meta"))
    shapes = {(e / (rh / h), h) for _, (e, eh, rh, _), _ in cases for h in [eh / e]}
    assert {d for d, _ in shapes} == {ATTENTION_DEGREE, SHAPE_DEGREE}
    assert {h for _, h in shapes} == {8, 2}
    assert {srh / rh for _, (_, _, rh, srh), _ in cases} == {1.0, 1 / 16, 1 / 4, 4.0, 16.0}
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


def test_model_reads_each_strategys_kernel_calls():
    """GP-AG's busiest rank runs its own rows at all H heads over the K/V of all N (padded) rows;
    GP-A2A's runs all N rows at H / p; the ring runs P calls, each its rows over one block."""
    fit = AttentionFit(*COEFFICIENTS, CACHE, 1.0)
    profile = _profile_with(fit)
    n, e, heads, p = 40_000, 600_000, 8, 4
    graph, model = GraphShape(num_nodes=n, num_edges=e), ModelShape(layers=1, hidden=128, heads=heads)
    a2a = predict("a2a", p, graph, model, profile, step=False)
    assert a2a.attention_s == pytest.approx(fit(e, e * heads / p, n * heads / p, n * heads / p))
    one = predict("ag", 1, graph, model, profile, step=False)
    assert one.attention_s == pytest.approx(fit(e, e * heads, n * heads))
    rows, edges = n // p, e // p
    ag = predict("ag", p, graph, model, profile, step=False)
    assert ag.attention_s == pytest.approx(fit(edges, edges * heads, rows * heads, n * heads))
    ring = predict("ag_ring", p, graph, model, profile, step=False)
    assert ring.attention_s == pytest.approx(p * fit(edges / p, edges * heads / p, rows * heads, rows * heads))
    assert ring.attention_s < ag.attention_s + (p - 1) * (fit.s_per_row_head * rows * heads + fit.s_per_call)
    halo_rows, halo = 10_500, 7_000  # GP-Halo's busiest part reads its own rows' and its halo's K/V
    split = SplitShape([halo_rows] + [9_834] * 3, [160_000] + [146_667] * 3, [halo] * 4, [halo] * 4)
    parted = GraphShape(num_nodes=n, num_edges=e, partitions={p: split})
    got = predict("halo", p, parted, model, profile, step=False).attention_s
    assert got == pytest.approx(fit(160_000, 160_000 * heads, halo_rows * heads, (halo_rows + halo) * heads))
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
