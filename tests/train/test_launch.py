"""The main job end to end: the deepspeed launcher, 2 CPU ranks, the quickstart config on Cora;
then `launch/predict.py` on the checkpoint, whose exported logits give the logged test accuracy."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dsgraph.comm.ports import free_port

pytestmark = pytest.mark.slow  # every test here starts processes

LAUNCHER = os.path.join(os.path.dirname(sys.executable), "deepspeed")


def _config(tmp_path) -> str:
    with open("ds_configs/cpu_quickstart.json") as f:
        config = json.load(f)
    config["tensorboard"]["output_path"] = str(tmp_path / "tb")  # tests write only in their folder
    path = tmp_path / "quickstart.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_deepspeed_launcher_trains_cora_on_two_ranks_and_predicts(tmp_path):
    metrics, config = tmp_path / "m.jsonl", _config(tmp_path)
    cmd = [
        LAUNCHER,
        "--num_accelerators",
        "2",
        "--master_port",
        str(free_port()),
        "launch/train.py",
        "--deepspeed_config",
        config,
        "--epochs",
        "3",
        "--eval-every",
        "3",
        "--metrics-out",
        str(metrics),
        "--checkpoint-dir",
        str(tmp_path / "ck"),
        "--checkpoint-every",
        "3",
        "--run-name",
        "cora-test",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "epoch    2  loss" in proc.stdout and "test_acc" in proc.stdout
    assert (
        f"run cora-test: metrics {metrics}" in proc.stdout
        and os.path.join(str(tmp_path / "tb"), "cora-test") in proc.stdout
    )
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["step", "util", "step", "util", "step", "util", "eval", "forecast"]
    rows = [r for r in rows if r["kind"] in ("step", "eval")]  # util: every rank's CPU use; forecast: the summary
    assert all(r["world_size"] == 2 for r in rows)
    out = tmp_path / "pred.npz"
    cmd = [
        LAUNCHER,
        "--num_accelerators",
        "1",
        "--master_port",
        str(free_port()),
        "launch/predict.py",
        "--config",
        config,
        "--checkpoint-dir",
        str(tmp_path / "ck"),
        "--out",
        str(out),
        "--bf16",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with np.load(out) as pred, np.load("dsgraph/data/cora.npz") as cora:
        test = pred["test_mask"]
        assert pred["logits"].shape == (2708, 7) and (test == cora["test_mask"]).all()
        accuracy = float((pred["logits"][test].argmax(1) == cora["y"][test]).mean())
    assert accuracy == rows[-1]["test_acc"]  # the quickstart trains in bf16; predict --bf16 runs the same forward


def test_console_command_lists_subcommands():
    proc = subprocess.run([sys.executable, "-m", "dsgraph", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "train" in proc.stdout and "predict" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "dsgraph", "nonsense"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown subcommand 'nonsense'" in proc.stderr
