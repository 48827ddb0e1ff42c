"""Checkpoint/resume gives the same losses as an uninterrupted run; metrics reach JSON lines and
TensorBoard with every required key."""

import glob
import json
import os

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dsgraph.train.metrics import STEP_KEYS
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, make_trainer, write_random_graph

pytestmark = pytest.mark.slow  # every test here starts processes


def _losses(path):
    with open(path) as f:
        return [row["loss"] for row in map(json.loads, f) if row["kind"] == "step"]


def _resume(rank, world, tmp):
    ds = ds_config(stage=2)
    common = dict(epochs=8, eval_every=4, checkpoint_every=4)
    full = make_trainer(tmp, ds, metrics_out=f"{tmp}/full.jsonl", checkpoint_dir=f"{tmp}/ck_full", **common)
    full.fit(log=lambda line: None)
    stopped = make_trainer(
        tmp, ds, metrics_out=f"{tmp}/part1.jsonl", checkpoint_dir=f"{tmp}/ck", **{**common, "epochs": 4}
    )
    stopped.fit(log=lambda line: None)  # stops after epoch 3, checkpoint saved there
    resumed = make_trainer(tmp, ds, metrics_out=f"{tmp}/part2.jsonl", checkpoint_dir=f"{tmp}/ck", **common)
    resumed.resume()
    assert resumed.start_epoch == 4
    resumed.fit(log=lambda line: None)
    if rank == 0:
        dump(tmp, "resume.json", {"full": _losses(f"{tmp}/full.jsonl"), "resumed": _losses(f"{tmp}/part2.jsonl")})


def test_resume_continues_with_identical_losses(tmp_path):
    write_random_graph(str(tmp_path))
    run(_resume, 2, tmp_path)
    result = load(tmp_path, "resume.json")
    full, resumed = result["full"], result["resumed"]
    assert len(full) == 8 and len(resumed) == 4
    for got, want in zip(resumed, full[4:]):
        assert abs(got - want) <= 1e-6, (resumed, full)


def _metrics(rank, world, tmp):
    tb = {"enabled": True, "output_path": f"{tmp}/tb", "job_name": "job"}
    trainer = make_trainer(
        tmp, ds_config(stage=1, tensorboard=tb), metrics_out=f"{tmp}/metrics.jsonl", epochs=4, eval_every=2
    )
    trainer.fit(log=lambda line: None)


def test_metrics_jsonl_and_tensorboard_have_required_values(tmp_path):
    write_random_graph(str(tmp_path))
    run(_metrics, 2, tmp_path)
    with open(tmp_path / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    steps = [r for r in rows if r["kind"] == "step"]
    evals = [r for r in rows if r["kind"] == "eval"]
    assert len(steps) == 4 and len(evals) == 2
    assert {r["kind"] for r in rows} == {"step", "eval", "util", "forecast"}  # util: every epoch, per rank
    assert rows[-1]["kind"] == "forecast" and rows[-1]["measured_peak_mem_mb"] > 0  # the run's last row
    assert [r["epoch"] for r in rows if r["kind"] == "util"] == [r["epoch"] for r in steps]
    for row in steps + evals:
        assert set(STEP_KEYS) <= set(row), set(STEP_KEYS) - set(row)
        assert row["world_size"] == 2 and row["strategy"] == "ag"
        assert row["comm_bytes"] > 0 and row["peak_mem_mb"] > 0 and row["step_time_s"] > 0
    for row in evals:
        assert 0.0 <= row["val_acc"] <= 1.0 and 0.0 <= row["test_acc"] <= 1.0
    assert [r["step"] for r in steps] == [1, 2, 3, 4]

    files = glob.glob(os.path.join(tmp_path, "tb", "**", "events.out.tfevents.*"), recursive=True)
    assert files, "no TensorBoard event file"
    acc = EventAccumulator(os.path.dirname(files[0]))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for key in ("loss", "train_acc", "step_time_s", "comm_time_s", "comm_bytes", "peak_mem_mb", "world_size"):
        assert f"dsgraph/step/{key}" in tags, key
    for key in ("val_acc", "test_acc"):
        assert f"dsgraph/eval/{key}" in tags, key
    logged = [e.value for e in acc.Scalars("dsgraph/step/loss")]
    assert logged == pytest.approx([r["loss"] for r in steps], abs=1e-6)
