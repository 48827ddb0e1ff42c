"""Log-log fits, and loading profiles: round trip and every kind of bad input."""

import dataclasses
import json
import math

import pytest

from dsgraph.agp.fits import fit_loglog
from dsgraph.agp.measure import head_dim_knee
from dsgraph.agp.profile import load_profile
from dsgraph.agp.synthetic import linear_profile

PER_BYTE = {"all_gather": 1e-9, "reduce_scatter": 1e-9, "all_to_all": 2e-9, "all_to_all_uneven": 2e-9}


def _profile(max_ranks=2, **kw):
    return linear_profile(
        max_ranks=max_ranks, attention_s_per_edge_head=1e-8, rest_s_per_mac=1e-11, collective_s_per_byte=PER_BYTE, **kw
    )


def test_power_law_is_recovered_exactly():
    fit = fit_loglog([(x, 3e-6 * x**0.8) for x in (2.0**10, 2.0**14, 2.0**20)])
    assert fit.slope == pytest.approx(0.8)
    assert fit.r2 == pytest.approx(1.0)
    assert fit(2.0**16) == pytest.approx(3e-6 * 2.0**12.8)


def test_noisy_points_have_r2_below_one():
    fit = fit_loglog([(1.0, 1.0), (2.0, 4.0), (4.0, 3.0), (8.0, 20.0)])
    assert 0.0 < fit.r2 < 1.0


def test_fit_needs_two_distinct_sizes():
    with pytest.raises(ValueError, match="at least two points"):
        fit_loglog([(8.0, 1.0), (8.0, 2.0)])


def test_profile_round_trip(tmp_path):
    path = str(tmp_path / "p.json")
    original = _profile(max_ranks=3)
    original.save(path)
    loaded = load_profile(path)
    assert sorted(loaded.ranks) == [1, 2, 3]
    for p in (2, 3):
        for name, fit in original.ranks[p].collectives.items():
            assert loaded.ranks[p].collectives[name](2.0**20) == pytest.approx(fit(2.0**20))
    assert loaded.backend == "cuda" and loaded.dtype == "float32"
    assert [loaded.ranks[p].head_dim_knee for p in (1, 2, 3)] == [0.0] * 3  # absent: cost in proportion to D


def test_head_dim_knee_round_trip_and_measurement(tmp_path):
    profile = _profile(max_ranks=2)
    profile = profile.replace_ranks({p: dataclasses.replace(f, head_dim_knee=12.5) for p, f in profile.ranks.items()})
    profile.save(str(tmp_path / "k.json"))
    assert load_profile(str(tmp_path / "k.json")).ranks[2].head_dim_knee == 12.5
    # t(2D) / t(D) = (knee + 2D) / (knee + D): a ratio of 1.5 at D = 16 means knee = 16; 2.0 means 0
    raw = {"attention": [(1.0, 2.0), (4.0, 8.0)], "attention_2d": [(1.0, 3.0), (4.0, 12.0)]}
    assert head_dim_knee(raw, 16) == pytest.approx(16.0)
    raw["attention_2d"] = [(1.0, 4.0), (4.0, 16.0)]
    assert head_dim_knee(raw, 16) == pytest.approx(0.0)


def test_missing_profile(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such AGP profile; write one with `dsgraph profile"):
        load_profile(str(tmp_path / "absent.json"))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: "{not json", "not valid JSON"),
        (lambda d: {**d, "format": "other"}, "not a dsgraph AGP profile"),
        (lambda d: {**d, "version": 99}, "version 99 is not supported"),
        (lambda d: {**d, "heads": "8"}, "key 'heads' must be a int"),
        (lambda d: {**d, "dtype": "int8"}, "dtype 'int8' is not one of"),
        (lambda d: {**d, "ranks": {k: v for k, v in d["ranks"].items() if k != "1"}}, "no single-rank fits"),
        (lambda d: {**d, "ranks": {**d["ranks"], "x": {}}}, "rank count key 'x'"),
        (
            lambda d: {**d, "ranks": {**d["ranks"], "2": {**d["ranks"]["2"], "collectives": {}}}},
            r"ranks.2.collectives must hold fits",
        ),
        (
            lambda d: {**d, "ranks": {**d["ranks"], "1": {**d["ranks"]["1"], "attention": {"slope": 1}}}},
            r"ranks.1.attention: malformed fit",
        ),
        (
            lambda d: {**d, "ranks": {**d["ranks"], "2": {**d["ranks"]["2"], "head_dim_knee": -3}}},
            r"ranks.2.head_dim_knee must be a non-negative number",
        ),
    ],
)
def test_malformed_profiles_name_the_problem(tmp_path, mutate, message):
    path = tmp_path / "bad.json"
    data = mutate(_profile().to_dict())
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    with pytest.raises(ValueError, match=message):
        load_profile(str(path))


def test_backend_dtype_and_rank_coverage_are_checked():
    profile = _profile(max_ranks=2)
    profile.check_matches("cuda", "float32")
    with pytest.raises(ValueError, match="measured with the 'cuda' attention backend, but this run uses 'cpu'"):
        profile.check_matches(backend="cpu")
    with pytest.raises(ValueError, match="measured in float32, but this run uses bfloat16"):
        profile.check_matches(dtype="bfloat16")
    with pytest.raises(ValueError, match=r"covers rank counts \[1, 2\], not 4; run `dsgraph profile --max-ranks 4`"):
        profile.fits(4)


def test_linear_profile_is_close_to_its_costs():
    fit = _profile().ranks[2].collectives["all_to_all"]
    assert fit(2.0**30) == pytest.approx(2e-9 * 2.0**30, rel=0.35)
    assert math.isfinite(fit.r2) and fit.r2 > 0.9
