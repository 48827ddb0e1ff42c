"""The auto decision, its fallbacks and its recalibration, on one process with a stub control plane."""

import re

import pytest

from dsgraph.agp.decide import AutoStrategy, contiguous_shape
from dsgraph.agp.synthetic import linear_profile
from dsgraph.comm import GraphParallelGroup, RowSplit
from dsgraph.parallel import auto_candidates
from dsgraph.parallel.shapes import ModelShape
from dsgraph.train.config import DsgraphConfig
from tests.graphs import random_graph

COMM_HEAVY = {"all_gather": 1e-7, "reduce_scatter": 1e-7, "all_to_all": 1.15e-7, "all_to_all_uneven": 1e-5}


class OneRankControl:
    """Rank 0's view of the control plane: a broadcast from rank 0 returns its own object."""

    name, rank, world_size = "stub", 0, 1

    def bcast(self, obj, root=0):
        return obj

    def allgather(self, obj):
        return [obj]


def _auto(tmp_path, profile_path=None, backend="reference", world=2, **cfg):
    settings = dict(strategy="auto", agp_profile=profile_path, hidden=32, heads=4, layers=2, agp_recalibrate_after=3)
    settings.update(cfg)
    graph = random_graph().with_self_loops()
    pg = GraphParallelGroup(rank=0, world_size=world)
    cfg = DsgraphConfig.from_dict(settings)
    shape = contiguous_shape(graph, list(RowSplit.even(graph.num_nodes, world).counts))
    model = ModelShape(cfg.layers, cfg.hidden, cfg.heads, cfg.ffn_mult, graph.num_features, graph.num_classes)
    agp = cfg.agp
    return AutoStrategy(
        agp.profile, agp.recalibrate_after, shape, model, pg, OneRankControl(), backend, "float32", log=lambda m: None
    )


def _write_profile(tmp_path, per_byte=COMM_HEAVY, backend="reference", max_ranks=2):
    path = str(tmp_path / "profile.json")
    linear_profile(
        max_ranks=max_ranks,
        attention_s_per_edge_head=1e-9,
        rest_s_per_mac=1e-13,
        collective_s_per_byte=per_byte,
        backend=backend,
    ).save(path)
    return path


def test_decision_names_strategy_and_prediction(tmp_path):
    auto = _auto(tmp_path, _write_profile(tmp_path))
    assert auto.current == "ag"
    assert auto.decision.predicted_step_time_s > 0 and not auto.decision.fallback
    assert auto.metrics()["agp_decision"].startswith("ag (auto: pick ag on 2 ranks")
    assert [e["event"] for e in auto.events] == ["decision"]
    assert [row["strategy"] for row in auto.decision.table] == auto_candidates()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda tmp: None, "needs 'agp.profile'"),
        (lambda tmp: str(tmp / "absent.json"), "no such AGP profile"),
        (lambda tmp: (tmp / "bad.json").write_text("{") and str(tmp / "bad.json"), "not valid JSON"),
        (
            lambda tmp: _write_profile(tmp, backend="cuda"),
            "measured with the 'cuda' attention backend, but this run uses 'reference'",
        ),
        (lambda tmp: _write_profile(tmp, max_ranks=1), "covers rank counts \\[1\\], not the world size 2"),
    ],
)
def test_bad_profiles_fall_back_to_ag_and_say_why(tmp_path, make, message):
    auto = _auto(tmp_path, make(tmp_path))
    assert auto.current == "ag" and auto.decision.fallback
    assert auto.decision.predicted_step_time_s is None
    label = auto.metrics()["agp_decision"]
    assert label.startswith("ag (fallback: ")
    assert re.search(message, label), label
    for _ in range(10):  # no recalibration on a fallback
        auto.after_step(1.0, 0.5)
    assert auto.current == "ag"


def test_recalibration_switches_when_another_is_20_percent_faster(tmp_path):
    auto = _auto(tmp_path, _write_profile(tmp_path))
    table = {row["strategy"]: row for row in auto.decision.table}
    ag = table["ag"]
    for _ in range(3):  # warm-up + 2 steps: not enough yet
        auto.after_step(ag["time_s"] + 9 * ag["comm_s"], 10 * ag["comm_s"])
    assert auto.current == "ag"
    auto.after_step(ag["time_s"] + 9 * ag["comm_s"], 10 * ag["comm_s"])  # AG's collectives are 10x the profile
    others = [row for name, row in table.items() if name != "ag" and row["feasible"]]
    assert auto.current == min(others, key=lambda row: row["time_s"])["strategy"], auto.events  # the fastest other
    switch = auto.events[-1]
    assert switch["event"] == "switch" and switch["measured_step_time_s"] == pytest.approx(
        ag["time_s"] + 9 * ag["comm_s"]
    )
    assert switch["reasons"][0].startswith("recalibrated (comm x10.00")
    for _ in range(4 * len(others)):  # every other strategy measures far slower than AG did: each is tried once,
        auto.after_step(100.0, 1.0)  # then AG, measured fastest, stays
    assert auto.current == "ag"
    for _ in range(20):
        auto.after_step(1000.0, 1.0)
    events = [e["event"] for e in auto.events]
    assert events[0] == "decision" and events[-1] == "switch" and 2 <= events.count("switch") <= len(others) + 1


def test_no_switch_below_the_threshold(tmp_path):
    auto = _auto(tmp_path, _write_profile(tmp_path))
    ag = {row["strategy"]: row for row in auto.decision.table}["ag"]
    for _ in range(4):  # measured exactly as predicted
        auto.after_step(ag["time_s"], ag["comm_s"])
    assert auto.current == "ag"
    assert auto.events[-1]["event"] == "recalibrated"
