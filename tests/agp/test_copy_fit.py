"""The profile's copy fit and the model's copies term: round trip, profiles without it (predictions
as before), a malformed one named, each strategy's copied values priced per layer, a ring's merges
hidden under its collectives, and the measured case."""

import dataclasses
import json

import pytest
import torch

from dsgraph.agp.fits import LatencyBandwidthFit, fit_latency_bandwidth
from dsgraph.agp.measure import COPY_WIDTH, _copy_cases
from dsgraph.agp.model import predict
from dsgraph.agp.profile import load_profile
from dsgraph.agp.synthetic import linear_profile
from dsgraph.parallel import auto_candidates, get_strategy
from dsgraph.parallel.shapes import GraphShape, ModelShape

PER_BYTE = {"all_gather": 1e-9, "reduce_scatter": 1e-9, "all_to_all": 2e-9, "all_to_all_uneven": 2e-9}
COPY = LatencyBandwidthFit(latency_s=1e-5, s_per_byte=1e-9, r2=1.0, points=((1.0, 1e-5), (1e6, 1e-3)))
GRAPH = GraphShape.from_counts(65536, 1_000_000, [1, 2, 4], halo_fraction=0.2)
MODEL = ModelShape(layers=2, hidden=128, heads=8)


def _profile(copy=COPY):
    profile = linear_profile(
        max_ranks=4, attention_s_per_edge_head=1e-9, rest_s_per_mac=1e-12, collective_s_per_byte=PER_BYTE
    )
    return profile.replace_ranks({p: dataclasses.replace(f, copy=copy) for p, f in profile.ranks.items()})


def test_copy_fit_round_trip_and_profiles_without_it(tmp_path):
    path = str(tmp_path / "p.json")
    _profile().save(path)
    assert load_profile(path).ranks[2].copy(1e6) == pytest.approx(COPY(1e6))
    _profile(copy=None).save(path)
    assert "copy" not in json.loads(open(path).read())["ranks"]["2"]
    assert load_profile(path).ranks[2].copy is None


def test_malformed_copy_fit_is_named(tmp_path):
    data = _profile().to_dict()
    data["ranks"]["2"]["copy"] = {"model": "loglog", "log_a": 0.0, "slope": 1.0}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"ranks.2.copy: expected a latency_bandwidth fit"):
        load_profile(str(path))


@pytest.mark.parametrize("strategy", auto_candidates())
@pytest.mark.parametrize("p", [1, 2, 4])
def test_copies_are_priced_per_layer(strategy, p):
    kind = MODEL.layer_kinds()[0]
    terms = get_strategy(strategy).cost(p, GRAPH, kind.shape, 4)
    if isinstance(terms, str):
        pytest.skip(terms)
    with_copies = predict(strategy, p, GRAPH, MODEL, _profile(), step=False)
    without = predict(strategy, p, GRAPH, MODEL, _profile(copy=None), step=False)
    expected = MODEL.layers * COPY(terms.copied_values) if terms.copied_values else 0.0
    assert with_copies.time_terms["copies"] == pytest.approx(expected)
    assert without.time_terms["copies"] == 0.0
    assert sum(with_copies.time_terms.values()) == pytest.approx(with_copies.time_s)
    if terms.overlapped:  # the ring's merges run while its blocks travel: the longer of the two
        t = without.time_terms
        compute, comm = t["attention"] + expected, t["collectives"]
        assert with_copies.time_s - without.time_s == pytest.approx(
            max(compute, comm) - max(t["attention"], comm), abs=1e-12
        )
    else:
        assert with_copies.time_s - without.time_s == pytest.approx(expected)


def test_strategies_that_copy_more_cost_more_at_equal_fits():
    """On one rank count the copies order the strategies as their counts do (the a2a's layouts and
    the halo's gathers against GP-AG's padding)."""
    kind = MODEL.layer_kinds()[0].shape
    values = {s: get_strategy(s).cost(2, GRAPH, kind, 4).copied_values for s in ("ag", "a2a", "halo")}
    assert values["ag"] < values["a2a"] < values["halo"]
    assert values["a2a"] == pytest.approx(21 * 32768 * 128)  # 17 + 4 rows of d: more than one head per rank


def test_copy_cases_write_their_values():
    cases = _copy_cases(torch.float32, torch.device("cpu"))
    assert [c[0] for c in cases] == ["copy"] * len(cases)
    for _, values, run in cases[:2]:
        out = run()
        assert out.numel() == values and out.shape[-1] == COPY_WIDTH and out.is_contiguous()
    fit = fit_latency_bandwidth([(values, 1e-6 + 1e-9 * values) for _, values, _ in cases])
    assert fit(2.0**20) == pytest.approx(1e-6 + 1e-9 * 2.0**20)


def test_fit_table_shows_the_copy_rate():
    from dsgraph.agp.profile_cli import format_fits

    table = format_fits(_profile())
    assert " 2  copy " in table and "10 us + 1.00 G values/s" in table
    assert " copy " not in format_fits(_profile(copy=None))
