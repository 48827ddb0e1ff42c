"""``--nprocs auto``'s decision (``dsgraph/agp/launch.py``): the fastest (strategy, ranks) among those
predicted to fit a (fake) memory limit, from a (fake) profile; the plan file; the ranks' refusal of
a world size other than the pick's."""

import dataclasses
import json

import pytest

from dsgraph.agp.launch import LaunchPlan, candidates, check_world, pick, plan_launch
from dsgraph.agp.synthetic import linear_profile
from dsgraph.train.config import DsgraphConfig
from tests.train.helpers import ds_config

CHEAP_COMM = {"all_gather": 1e-12, "reduce_scatter": 1e-12, "all_to_all": 1e-12, "all_to_all_uneven": 1e-12}
DEAR_COMM = {"all_gather": 1e-5, "reduce_scatter": 1e-5, "all_to_all": 1e-5, "all_to_all_uneven": 1e-5}


def _profile(comm=CHEAP_COMM, max_ranks=4, dtype="float32"):
    return linear_profile(
        max_ranks=max_ranks,
        attention_s_per_edge_head=1e-8,
        rest_s_per_mac=1e-10,
        collective_s_per_byte=comm,
        backend="cpu",
        dtype=dtype,
    )


def _cfg(**changes):
    settings = dict(dataset="rmat:12", hidden=32, heads=4, layers=2, strategy="ag")
    settings.update(changes)
    return DsgraphConfig.from_dict(settings)


def test_cheap_collectives_pick_the_most_ranks_and_the_table_has_every_pair():
    plan = plan_launch(_cfg(), ds_config(), _profile(), 4, limit_of=lambda p: 1e9)
    assert plan.ranks == 4 and plan.step_time_s > 0 and plan.peak_mb > 0
    assert {(c["strategy"], c["ranks"]) for c in plan.candidates} >= {("ag", 1), ("halo", 4), ("a2a", 2)}
    assert plan.reasons[0].startswith(f"pick {plan.strategy} on 4 ranks")
    assert len(plan.table()) == 2 + len(plan.candidates)


def test_dear_collectives_keep_one_rank():
    plan = plan_launch(_cfg(), ds_config(), _profile(DEAR_COMM), 4, limit_of=lambda p: 1e9)
    assert plan.ranks == 1


def test_memory_limit_rules_out_the_pairs_that_do_not_fit():
    cfg, ds = _cfg(), ds_config()
    free = candidates(cfg, ds, _profile(DEAR_COMM), 4, limit_of=lambda p: 1e9)
    peak_1 = max(c.peak_mb for c in free if c.ranks == 1)
    peak_2 = max(c.peak_mb for c in free if c.ranks == 2 and c.peak_mb is not None)
    assert peak_2 < peak_1
    limit = (peak_1 + peak_2) / 2  # one rank does not fit, two do
    tight = candidates(cfg, ds, _profile(DEAR_COMM), 4, limit_of=lambda p: limit)
    assert all("over the limit" in c.reason for c in tight if c.ranks == 1)
    best, reasons = pick(tight)
    assert best.ranks >= 2 and any("ruled out" in r for r in reasons)
    with pytest.raises(ValueError, match=r"no \(strategy, ranks\) is predicted to fit.*ag@1: predicted peak"):
        plan_launch(cfg, ds, _profile(DEAR_COMM), 4, limit_of=lambda p: 1.0)


def test_heads_that_do_not_split_rule_out_a2a_with_the_reason():
    cands = candidates(_cfg(heads=6, hidden=48), ds_config(), _profile(), 4, limit_of=lambda p: 1e9)
    a2a_4 = next(c for c in cands if (c.strategy, c.ranks) == ("a2a", 4))
    assert not a2a_4.feasible and "6 heads" in a2a_4.reason


def test_only_full_graph_runs_and_the_profile_of_the_run_dtype():
    with pytest.raises(ValueError, match="give --nprocs N"):
        plan_launch(_cfg(mode="sampled"), ds_config(), _profile(), 4)
    with pytest.raises(ValueError, match="measured in float32, but this run uses bfloat16"):
        plan_launch(_cfg(), ds_config(bf16=True), _profile(), 4)


def test_a_whole_graph_without_a_name_is_measured():
    from dsgraph.graph import load_dataset

    cora = load_dataset("cora").with_self_loops()
    plan = plan_launch(_cfg(dataset="cora"), ds_config(), _profile(), 2, loaded=cora, limit_of=lambda p: 1e9)
    halo = [c for c in plan.candidates if c["strategy"] == "halo"]
    assert all(c["reason"] == "" for c in halo)  # a METIS partition was measured at each p
    with pytest.raises(ValueError, match="not known without loading"):
        plan_launch(_cfg(dataset="cora"), ds_config(), _profile(), 2)


def test_plan_file_round_trip_and_bad_files(tmp_path):
    plan = plan_launch(_cfg(), ds_config(), _profile(), 2, limit_of=lambda p: 1e9)
    path = str(tmp_path / "plans" / "p.json")
    plan.save(path)
    assert LaunchPlan.load(path) == plan
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 99}))
    with pytest.raises(ValueError, match="bad.json: not a launch plan"):
        LaunchPlan.load(str(bad))
    with pytest.raises(FileNotFoundError, match="no such launch plan"):
        LaunchPlan.load(str(tmp_path / "missing.json"))


def test_ranks_refuse_a_world_other_than_the_pick():
    plan = dataclasses.replace(
        plan_launch(_cfg(), ds_config(), _profile(), 2, limit_of=lambda p: 1e9), strategy="halo", ranks=2
    )
    cfg = check_world(plan, "p.json", _cfg(), 2, "CMD")
    assert cfg.strategy == "halo"
    refusal = r"picks halo on 2 ranks, but this job has 4 \(the extra ranks would only wait\); launch the pick: CMD"
    with pytest.raises(ValueError, match=refusal):
        check_world(plan, "p.json", _cfg(), 4, "CMD")
    with pytest.raises(ValueError, match="this job has 1"):
        check_world(plan, "p.json", _cfg(), 1, "CMD")
    with pytest.raises(ValueError, match="made for rmat:12, not rmat:13"):
        check_world(plan, "p.json", _cfg(dataset="rmat:13"), 2, "CMD")
