"""The hierarchical system description: the profile's ``hierarchy`` section (loading, every bad
field, old single-tier profiles) and the collectives over n nodes composed from the two tiers,
checked against hand-computed cases (exact linear fits, so every number below is arithmetic)."""

import json
import math
import os

import pytest

from dsgraph.agp.fits import LogLogFit
from dsgraph.agp.profile import Profile, RankFits, load_profile, profile_from_dict
from dsgraph.agp.tiers import Hierarchy, InterTier, Tier, all_to_all_time, ring_time, uneven_time

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "agp")


def per_byte(seconds_per_byte: float) -> LogLogFit:
    """t(x) = seconds_per_byte * x exactly."""
    return LogLogFit(math.log(seconds_per_byte), 1.0, 1.0)


def toy_profile(g=4, r=4) -> Profile:
    """Nodes of g = 4 ranks; intra: a g-rank all-gather / reduce-scatter of x bytes takes 3x / 100 s
    (busbw 100 B/s), an all-to-all x / 50 s; the inter link moves 10 B/s."""
    one = per_byte(1e-3)
    ranks = {1: RankFits(one, one)}
    for p in range(2, g + 1):
        ring = per_byte((p - 1) / 100)
        ranks[p] = RankFits(
            one,
            one,
            {
                "all_gather": ring,
                "reduce_scatter": ring,
                "all_to_all": per_byte(1 / 50),
                "all_to_all_uneven": per_byte(1 / 50),
            },
        )
    h = Hierarchy(
        g,
        Tier("toy intra", "measured", "hand-made"),
        InterTier("toy inter", "projected", "hand-made", links_per_node=r, link=per_byte(1 / 10)),
    )
    return Profile("cuda", "float32", 8, 16, 2, {"memory_capacity_bytes": 1e12}, ranks, "<toy>", h)


def test_ring_all_gather_over_two_nodes_by_hand():
    c = toy_profile().fits(8).collectives
    # P = 8, g = 4, r = 4, x = 1000: a step takes max(3 * 1000 / 100 / 3, (1000 / 4) / 10) = max(10, 25) s; 7 steps
    assert c["all_gather"](1000) == pytest.approx(175.0)
    assert c["reduce_scatter"](1000) == pytest.approx(175.0)
    # a node receives (P - 1) x = 7000 bytes, 1750 per rank
    assert c["all_gather"].inter_bytes(1000) == pytest.approx(1750.0)
    # all-reduce of 8000 bytes: ring reduce-scatter then all-gather of 1000-byte chunks
    assert c["all_reduce"](8000) == pytest.approx(350.0)


def test_ring_is_bound_by_the_faster_tier_when_the_links_are_fast():
    intra, link = per_byte(3 / 100), per_byte(1 / 1e6)
    # inter step (250 B at 1 MB/s) is negligible: 7 steps of the intra step 10 s
    assert ring_time(intra, link, 1000, nodes=2, g=4, r=4) == pytest.approx(70.0)
    # one node: the g-rank all-gather itself, (g - 1) steps
    assert ring_time(intra, link, 1000, nodes=1, g=4, r=4) == pytest.approx(30.0)


def test_all_to_all_over_two_nodes_by_hand():
    c = toy_profile().fits(8).collectives
    # intra: the 4-rank all-to-all at x / n = 500 B: 10 s; inter: (n-1)/n x g/r = 500 B at 10 B/s: 50 s; concurrent
    assert c["all_to_all"](1000) == pytest.approx(50.0)
    assert c["all_to_all"].inter_bytes(1000) == pytest.approx(500.0)
    # four nodes (P = 16): intra at 250 B = 5 s, inter 750 B = 75 s
    assert toy_profile().fits(16).collectives["all_to_all"](1000) == pytest.approx(75.0)
    # fewer links than ranks: 2 links per node carry 2 ranks' bytes each
    assert all_to_all_time(per_byte(1 / 50), per_byte(1 / 10), 1000, nodes=2, g=4, r=2) == pytest.approx(100.0)


def test_uneven_all_to_all_with_and_without_the_cross_node_share():
    c = toy_profile().fits(8).collectives["all_to_all_uneven"]
    # 1000 B of halo, 100 B from the other node: intra 900 / 50 = 18 s, inter 100 / 10 = 10 s
    assert c.split(1000, 100) == pytest.approx(18.0)
    assert c.inter_bytes(1000, 100) == pytest.approx(100.0)
    # unknown share: remote rows spread over the other 7 ranks, 4 of them on the other node
    assert c(1000) == pytest.approx(1000 * 4 / 7 / 10)
    assert uneven_time(per_byte(1 / 50), per_byte(1 / 10), 1000, 5000, g=4, r=4) == pytest.approx(100.0)  # clamped to x


def test_one_tier_names():
    c = toy_profile().fits(12).collectives  # 3 nodes
    assert c["intra:all_to_all"](500) == pytest.approx(10.0)
    assert c["inter:all_gather"](100) == pytest.approx(2 * 10.0)  # (n - 1) steps of 100 B through its own link
    assert c["inter:all_to_all"](300) == pytest.approx(20.0)  # 2/3 of 300 B
    assert c["inter:all_to_all_uneven"](100) == pytest.approx(10.0)
    assert c["inter:all_gather"].inter_bytes(100) == pytest.approx(200.0)


def test_coverage_and_composed_fits():
    profile = toy_profile()
    assert profile.rank_counts(16) == [1, 2, 3, 4, 8, 12, 16]
    assert profile.covers(8) and not profile.covers(6) and profile.nodes(12) == 3 and profile.nodes(3) == 1
    fits = profile.fits(8)
    assert fits.attention is profile.ranks[4].attention  # a rank computes as on a full node
    with pytest.raises(ValueError, match="whole nodes of 4 ranks, not 6"):
        profile.fits(6)
    smaller = profile.with_ranks_per_node(2)
    assert smaller.rank_counts(8) == [1, 2, 3, 4, 6, 8] and smaller.hierarchy.ranks_per_node == 2


def test_hierarchy_round_trip(tmp_path):
    path = str(tmp_path / "h.json")
    toy_profile().save(path)
    loaded = load_profile(path)
    assert loaded.hierarchy.ranks_per_node == 4 and loaded.hierarchy.inter.links_per_node == 4
    assert loaded.hierarchy.intra.status == "measured" and loaded.hierarchy.inter.status == "projected"
    assert loaded.fits(8).collectives["all_gather"](1000) == pytest.approx(175.0)


def test_old_single_tier_profiles_load_unchanged(tmp_path):
    for name in ("cpu_profile.json",):
        path = os.path.join(DOCS, name)
        profile = load_profile(path)
        assert profile.hierarchy is None and profile.rank_counts(16) == sorted(profile.ranks)
        with open(path) as f:
            assert profile.to_dict() == {**json.load(f)}  # written back byte-for-byte the same data
        with pytest.raises(ValueError, match="one tier"):
            profile.with_ranks_per_node(2)


def test_shipped_dgx_profiles_describe_nodes_of_eight_as_projected():
    for name in ("dgx_h100_8gpu_profile.json", "dgx_h100_8gpu_bf16_profile.json"):
        profile = load_profile(os.path.join(DOCS, name))
        h = profile.hierarchy
        assert h.ranks_per_node == 8 and h.inter.links_per_node == 8
        assert {h.compute.status, h.intra.status, h.inter.status} == {"projected"}
        assert "ConnectX-7" in h.inter.source and "nccl-tests" in h.intra.source
        assert profile.covers(32) and profile.nodes(32) == 4
        # one 1 GB transfer through a 400 Gb/s link at 90%: ~22 ms (the fit is within 10% there)
        assert h.inter.link(1e9) == pytest.approx(1e9 / 45e9, rel=0.1)


def _bad(mutate):
    d = toy_profile().to_dict()
    mutate(d["hierarchy"])
    return d


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda h: h.update(ranks_per_node=0), r"hierarchy.ranks_per_node must be a positive integer"),
        (lambda h: h.update(ranks_per_node=True), r"hierarchy.ranks_per_node must be a positive integer"),
        (
            lambda h: h.update(ranks_per_node=8),
            r"ranks_per_node is 8, but the profile's fits cover rank counts \[1, 2, 3, 4\]",
        ),
        (lambda h: h.pop("intra"), r"hierarchy.intra must be an object"),
        (lambda h: h["intra"].update(status="guessed"), r"hierarchy.intra.status must be one of measured, projected"),
        (lambda h: h["inter"].update(source=""), r"hierarchy.inter.source must be a non-empty string"),
        (lambda h: h["inter"].update(name=3), r"hierarchy.inter.name must be a non-empty string"),
        (lambda h: h["inter"].update(figures=[]), r"hierarchy.inter.figures must be an object"),
        (lambda h: h["inter"].update(links_per_node=0), r"hierarchy.inter.links_per_node must be a positive integer"),
        (lambda h: h["inter"].pop("link"), r"hierarchy.inter has no 'link' fit"),
        (lambda h: h["inter"].update(link={"slope": 1}), r"hierarchy.inter.link: malformed fit"),
        (
            lambda h: h.update(compute={"name": "x", "status": "measured"}),
            r"hierarchy.compute.source must be a non-empty string",
        ),
    ],
)
def test_malformed_hierarchy_names_the_field(mutate, message):
    with pytest.raises(ValueError, match=message):
        profile_from_dict(_bad(mutate), source="<bad>")


def test_hierarchy_must_be_an_object():
    d = toy_profile().to_dict()
    d["hierarchy"] = [8]
    with pytest.raises(ValueError, match="hierarchy must be an object"):
        profile_from_dict(d)


def test_a_one_gpu_measurement_with_projected_collectives_keeps_the_nodes():
    from dsgraph.agp.profile import with_collectives_from
    from dsgraph.agp.synthetic import linear_profile

    one = linear_profile(
        max_ranks=1,
        attention_s_per_edge_head=1e-9,
        rest_s_per_mac=1e-12,
        collective_s_per_byte=dict.fromkeys(("all_gather", "reduce_scatter", "all_to_all", "all_to_all_uneven"), 1e-9),
        system={"description": "one measured GPU"},
    )
    merged = with_collectives_from(one, toy_profile(), 4)
    assert merged.hierarchy.ranks_per_node == 4 and merged.covers(8)
    assert merged.hierarchy.compute.status == "measured" and "one measured GPU" in merged.hierarchy.compute.name
    assert merged.hierarchy.inter.status == "projected"
    assert with_collectives_from(one, toy_profile(), 2).hierarchy is None  # nodes of 4 need fits for p = 1..4
