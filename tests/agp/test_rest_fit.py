"""The rest of a layer: ``RestFit`` (a * MACs + (b + m * miss) * node-values + c * layers, miss the share
of a block's values past the cache) on synthetic points, the block it is measured on, old profiles
still loading, and the model's compute terms."""

import math

import pytest
import torch

from dsgraph.agp.fits import LogLogFit, RestFit, fit_loglog, fit_rest, miss_share, rest_from_dict, rest_seconds
from dsgraph.agp.measure import CPU_SIZES, CUDA_SIZES, AttentionStandIn
from dsgraph.agp.model import GraphShape, ModelShape, predict
from dsgraph.agp.profile import load_profile, profile_from_dict
from dsgraph.agp.synthetic import linear_profile
from dsgraph.models.graph_transformer import TransformerBlock

PER_BYTE = {"all_gather": 1e-9, "reduce_scatter": 1e-9, "all_to_all": 1e-9, "all_to_all_uneven": 1e-9}
FFN = 2


def block_point(n, d, a, b, c, missed=0.0, cache=0.0):
    macs, values = n * d * d * (4 + 2 * FFN), n * d
    return macs, values, a * macs + (b + missed * miss_share(values, cache)) * values + c


def test_fit_recovers_every_term_and_the_cache_from_blocks_of_several_widths():
    a, b, m, c, cache = 60e-12, 20e-9, 30e-9, 1.5e-3, 2.0**18
    fit = fit_rest([block_point(n, d, a, b, c, m, cache) for n, d in CPU_SIZES.rest_shapes])
    got = (fit.s_per_mac, fit.s_per_value, fit.s_per_missed_value, fit.s_per_layer)
    assert got == pytest.approx((a, b, m, c), rel=1e-6)
    assert fit.cache_values == cache and fit.r2 == pytest.approx(1.0)
    n, d = 524_288, 128  # beyond the measured sizes: the terms extrapolate
    point = block_point(n, d, a, b, c, m, cache)
    assert fit(*point[:2]) == pytest.approx(point[2], rel=1e-6)
    assert fit(3 * point[0], 3 * point[1], 3) == pytest.approx(3 * point[2], rel=1e-6)  # the cache is per block


def test_fit_separates_what_one_power_of_macs_cannot():
    """Equal MACs at (32768, 128) and (131072, 64), the second with twice the node-values: a power of
    MACs gives both one time, the rest fit each its own."""
    a, b, c = 50e-12, 60e-9, 1e-3
    points = [block_point(n, d, a, b, c) for n, d in CPU_SIZES.rest_shapes]
    fit = fit_rest(points)
    wide, narrow = block_point(32768, 128, a, b, c), block_point(131072, 64, a, b, c)
    assert wide[0] == narrow[0] and narrow[2] > 1.2 * wide[2]
    assert fit(*narrow[:2]) / fit(*wide[:2]) == pytest.approx(narrow[2] / wide[2], rel=1e-6)
    line = fit_loglog([(m, t) for m, _, t in points])
    assert line(narrow[0]) == line(wide[0])


def test_fit_keeps_every_coefficient_non_negative():
    """Times that fall with the node-values at fixed MACs would want b < 0: the fit drops that term."""
    points = [(1e9, 1e6, 0.10), (1e9, 4e6, 0.09), (4e9, 1e6, 0.40), (4e9, 4e6, 0.38), (2e9, 2e6, 0.2)]
    fit = fit_rest(points)
    assert min(fit.s_per_mac, fit.s_per_value, fit.s_per_missed_value, fit.s_per_layer) >= 0.0
    assert fit.s_per_value == 0.0 and fit.s_per_missed_value == 0.0 and fit.s_per_mac > 0.0
    for m, v, t in points:
        assert fit(m, v) == pytest.approx(t, rel=0.1)


def test_fit_needs_two_hidden_sizes():
    one_width = [block_point(n, 64, 1e-11, 1e-8, 1e-3) for n in (128, 512, 2048, 8192)]
    with pytest.raises(ValueError, match="not in one proportion"):
        fit_rest(one_width)
    with pytest.raises(ValueError, match="at least three"):
        fit_rest(one_width[:2])


def test_rest_fit_round_trip_and_malformed():
    fit = fit_rest([block_point(n, d, 6e-11, 4e-8, 2e-3) for n, d in CPU_SIZES.rest_shapes])
    again = rest_from_dict(fit.to_dict(), "here")
    assert again == fit and isinstance(again, RestFit)
    bad = {**fit.to_dict(), "s_per_value": -1.0}
    message = "here: s_per_mac, s_per_value, s_per_missed_value, s_per_layer and cache_values must be finite and >= 0"
    with pytest.raises(ValueError, match=message):
        rest_from_dict(bad, "here")
    with pytest.raises(ValueError, match=message):
        rest_from_dict({**fit.to_dict(), "cache_values": -1.0}, "here")
    with pytest.raises(ValueError, match="unknown rest fit model 'cubic'"):
        rest_from_dict({**fit.to_dict(), "model": "cubic"}, "here")
    assert fit.scaled(2.0)(1e9, 1e6, 1) == pytest.approx(2 * fit(1e9, 1e6, 1))
    old = {"model": "macs_values", "s_per_mac": 6e-11, "s_per_value": 4e-8, "s_per_layer": 2e-3, "r2": 0.99}
    loaded = rest_from_dict(old, "old")  # the form of 2026-12-04: no cache term
    assert (loaded.s_per_missed_value, loaded.cache_values) == (0.0, 0.0)
    assert loaded(1e9, 1e6, 1) == pytest.approx(6e-11 * 1e9 + 4e-8 * 1e6 + 2e-3)


def test_measured_sizes_span_two_widths_at_least():
    for sizes in (CPU_SIZES, CUDA_SIZES):
        assert len({d for _, d in sizes.rest_shapes}) >= 2


def test_stand_in_sends_gradients_to_q_k_and_v():
    """The rest block's stand-in runs the q and k projections' backward (a pass-through skips it)."""
    d, heads = 32, 4
    for stand_in, q_k_grads in ((AttentionStandIn.apply, True), (lambda q, k, v: v, False)):
        torch.manual_seed(0)
        block = TransformerBlock(d, heads, FFN, dropout=0.0)
        h = torch.randn(64, d, requires_grad=True)
        block(h, stand_in, torch.arange(64), 0, 1, 1).sum().backward()
        grad = block.qkv.weight.grad  # rows [0, d): W_q, [d, 2d): W_k, [2d, 3d): W_v
        assert bool(grad[: 2 * d].abs().sum() > 0) is q_k_grads
        assert grad[2 * d :].abs().sum() > 0


def _profile(rest=None):
    profile = linear_profile(
        max_ranks=2, attention_s_per_edge_head=1e-8, rest_s_per_mac=1e-11, collective_s_per_byte=PER_BYTE
    )
    if rest is None:
        return profile
    return profile.replace_ranks(
        {p: type(f)(f.attention, rest, f.collectives, f.head_dim_knee) for p, f in profile.ranks.items()}
    )


def test_old_loglog_rest_profiles_load_and_predict_as_before(tmp_path):
    old = _profile()  # the synthetic profile's rest is a log-log line, as in profiles before RestFit
    data = old.to_dict()
    assert "model" not in data["ranks"]["1"]["rest"]
    loaded = profile_from_dict(data)
    assert isinstance(loaded.ranks[1].rest, LogLogFit)
    graph, model = GraphShape(num_nodes=50_000, num_edges=800_000), ModelShape(layers=2, hidden=64, heads=4)
    before, after = predict("ag", 2, graph, model, old), predict("ag", 2, graph, model, loaded)
    assert after.time_s == pytest.approx(before.time_s)
    path = tmp_path / "old.json"
    old.save(str(path))
    assert load_profile(str(path)).ranks[2].rest == old.ranks[2].rest
    assert rest_seconds(old.ranks[1].rest, 1e9, 5e6, 3) == old.ranks[1].rest(1e9)  # the MACs alone


def test_model_rest_term_is_macs_values_and_layers():
    a, b, c = 60e-12, 45e-9, 1.5e-3
    profile = _profile(RestFit(a, b, 0.0, c, 0.0, 1.0))
    n, e, d, layers = 40_000, 600_000, 96, 3
    graph, model = GraphShape(num_nodes=n, num_edges=e), ModelShape(layers=layers, hidden=d, heads=6, ffn_mult=FFN)
    pred = predict("ag", 1, graph, model, profile, step=False)
    expected = layers * (a * n * d * d * (4 + 2 * FFN) + b * n * d + c)
    assert pred.time_terms["projections"] == pytest.approx(expected)
    assert pred.rest_s == pytest.approx(expected)
    assert pred.time_s == pytest.approx(pred.attention_s + expected)
    wider = predict("ag", 1, graph, ModelShape(layers=layers, hidden=2 * d, heads=6, ffn_mult=FFN), profile, step=False)
    assert wider.rest_s - layers * c == pytest.approx(
        layers * (4 * a * n * d * d * (4 + 2 * FFN) + 2 * b * n * d)
    )  # MACs x4, values x2 when d doubles
    # a checkpointed layer runs its forward again: FORWARD_SHARE of one more layer's rest
    ck = predict(
        "ag",
        1,
        graph,
        ModelShape(layers=layers, hidden=d, heads=6, ffn_mult=FFN, checkpoint_every=layers),
        profile,
        step=False,
    )
    assert ck.rest_s == pytest.approx(expected * (1 + 1 / (3 * layers)))


def test_shipped_cpu_profile_has_the_rest_fit():
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "agp", "cpu_profile.json")
    profile = load_profile(path)
    for p, fits in profile.ranks.items():
        assert isinstance(fits.rest, RestFit), p
        assert len(fits.rest.points) == len(CPU_SIZES.rest_shapes)
        assert fits.rest.r2 > 0.9 and math.isfinite(fits.rest.s_per_mac)
