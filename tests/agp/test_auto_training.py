"""``"strategy": "auto"`` on 2 gloo ranks through DeepSpeed: the pick trains exactly like that strategy
chosen by hand, switching strategies between steps keeps the losses, and the decision with its
predicted and measured time reaches the metrics file and TensorBoard."""

import glob
import json
import os

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dsgraph.agp.synthetic import linear_profile
from dsgraph.parallel import auto_candidates, get_strategy
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, make_trainer, write_random_graph

pytestmark = pytest.mark.slow  # every test here starts processes

# all-gather / reduce-scatter and the uneven all-to-all made expensive: the model must pick a2a
A2A_WINS = {"all_gather": 1e-4, "reduce_scatter": 1e-4, "all_to_all": 1e-9, "all_to_all_uneven": 1e-4}
STEPS = 5


def _profile(tmp) -> str:
    path = os.path.join(tmp, "profile.json")
    if not os.path.exists(path):
        linear_profile(
            max_ranks=2,
            attention_s_per_edge_head=1e-9,
            rest_s_per_mac=1e-12,
            collective_s_per_byte=A2A_WINS,
            backend="reference",
        ).save(path)
    return path


def _trainer(tmp, strategy, **extra):
    return make_trainer(
        tmp,
        ds_config(stage=1, **extra.pop("ds", {})),
        strategy=strategy,
        backend="reference",
        agp_profile=_profile(tmp),
        agp_recalibrate_after=0,
        **extra,
    )


def _decision(trainer):
    return trainer.mode.train_attention.auto


def _auto_vs_hand_and_switch(rank, world, tmp):
    auto = _trainer(tmp, "auto")
    assert _decision(auto).current == "a2a"
    auto_rows = [auto.train_epoch(e) for e in range(STEPS)]
    hand = _trainer(tmp, "a2a", partition_method=get_strategy("auto").split_method)  # auto's row split
    hand_losses = [hand.train_epoch(e)["loss"] for e in range(STEPS)]
    switched = _trainer(tmp, "auto")
    losses = []
    for epoch, name in enumerate(["a2a", "ag", "halo", "ag", "a2a"]):
        if _decision(switched).current != name:
            _decision(switched).switch_to(name, "forced by the test")
        row = switched.train_epoch(epoch)
        assert row["strategy"] == name
        losses.append(row["loss"])
    if rank == 0:
        dump(tmp, "auto.json", {"auto": auto_rows, "hand": hand_losses, "switched": losses})


def test_auto_equals_its_pick_and_switching_keeps_losses(tmp_path):
    write_random_graph(str(tmp_path))
    run(_auto_vs_hand_and_switch, 2, tmp_path)
    got = load(tmp_path, "auto.json")
    auto_losses = [r["loss"] for r in got["auto"]]
    assert auto_losses == got["hand"]  # the same strategy computes the same numbers
    assert got["switched"] == pytest.approx(got["hand"], rel=1e-5, abs=1e-6)
    for row in got["auto"]:
        assert row["strategy"] == "a2a" and row["predicted_step_time_s"] > 0
        assert row["agp_decision"].startswith("a2a (auto: pick a2a on 2 ranks")


def _fit_with_metrics(rank, world, tmp, dataset):
    tb = {"enabled": True, "output_path": f"{tmp}/tb", "job_name": "auto"}
    trainer = _trainer(
        tmp,
        "auto",
        ds={"tensorboard": tb},
        dataset=dataset,
        metrics_out=f"{tmp}/metrics.jsonl",
        epochs=3,
        eval_every=3,
        self_loops=True,
    )
    trainer.fit(log=lambda line: None)
    pick = _decision(trainer).current
    hand = _trainer(tmp, pick, dataset=dataset, self_loops=True, partition_method=get_strategy("auto").split_method)
    losses = [hand.train_epoch(e)["loss"] for e in range(3)]
    if rank == 0:
        dump(tmp, "hand.json", {"pick": pick, "losses": losses})


@pytest.mark.parametrize("dataset", ["cora", "rmat:9:8"])
def test_auto_trains_cora_and_rmat_and_reports_the_decision(tmp_path, dataset):
    run(_fit_with_metrics, 2, tmp_path, dataset)
    with open(tmp_path / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    hand = load(tmp_path, "hand.json")
    decision = [r for r in rows if r["kind"] == "agp"]
    steps = [r for r in rows if r["kind"] == "step"]
    assert decision[0]["event"] == "decision" and decision[0]["strategy"] == hand["pick"] == "a2a"
    assert decision[0]["predicted_step_time_s"] > 0 and len(decision[0]["table"]) == len(auto_candidates())
    assert [r["loss"] for r in steps] == hand["losses"]
    for r in steps:
        assert r["strategy"] == "a2a" and r["predicted_step_time_s"] > 0 and r["step_time_s"] > 0
    (forecast,) = [r for r in rows if r["kind"] == "forecast"]  # the decision's prediction against the steps
    assert forecast["predicted_step_time_s"] == steps[-1]["predicted_step_time_s"]
    if dataset.startswith("rmat"):  # sizes known from the name: the peak of the strategy auto runs
        assert all(r["predicted_peak_mem_mb"] > 0 for r in steps)
        assert forecast["predicted_peak_mem_mb"] == steps[-1]["predicted_peak_mem_mb"]
    files = glob.glob(
        os.path.join(tmp_path, "tb", "**", "events.out.tfevents.*"), recursive=True
    )  # DeepSpeed may name the folder itself
    acc = EventAccumulator(os.path.dirname(files[0]), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    assert "dsgraph/step/predicted_step_time_s" in acc.Tags()["scalars"]
    assert "dsgraph/step/step_time_s" in acc.Tags()["scalars"]
    assert "dsgraph/agp/strategy_index" in acc.Tags()["scalars"]
    assert any(t.startswith("dsgraph/agp/decision") for t in acc.Tags()["tensors"])


def _fit_named(rank, world, tmp):
    trainer = _trainer(
        tmp, "ag", dataset="rmat:9:8", metrics_out=f"{tmp}/named.jsonl", epochs=3, eval_every=3, self_loops=True
    )
    trainer.fit(log=lambda line: None)


def test_a_named_strategy_with_a_profile_reports_predicted_and_measured_step_and_memory(tmp_path):
    run(_fit_named, 2, tmp_path)
    with open(tmp_path / "named.jsonl") as f:
        rows = [json.loads(line) for line in f]
    steps = [r for r in rows if r["kind"] == "step"]
    for r in steps:
        assert r["strategy"] == "ag" and r["predicted_step_time_s"] > 0 and r["predicted_peak_mem_mb"] > 0
    (forecast,) = [r for r in rows if r["kind"] == "forecast"]
    assert forecast["predicted_step_time_s"] == steps[0]["predicted_step_time_s"]
    assert forecast["predicted_peak_mem_mb"] == steps[0]["predicted_peak_mem_mb"]
    assert len(forecast["measured_peak_mem_mb_per_rank"]) == 2 and forecast["measured_steps"] == 2
    assert forecast["measured_peak_mem_mb"] == max(forecast["measured_peak_mem_mb_per_rank"]) > 0
    assert forecast["step_time_error"] == pytest.approx(
        forecast["predicted_step_time_s"] / forecast["measured_step_time_s"] - 1
    )
