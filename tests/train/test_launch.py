"""The main job end to end: the deepspeed launcher, 2 CPU ranks, the quickstart config on Cora."""

import json
import os
import subprocess
import sys

from dsgraph.comm.ports import free_port


def test_deepspeed_launcher_trains_cora_on_two_ranks(tmp_path):
    metrics = tmp_path / "m.jsonl"
    launcher = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    cmd = [launcher, "--num_accelerators", "2", "--master_port", str(free_port()), "launch/train.py", "--deepspeed_config", "ds_configs/cpu_quickstart.json",
           "--epochs", "3", "--eval-every", "3", "--metrics-out", str(metrics), "--checkpoint-dir", str(tmp_path / "ck")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "epoch    2  loss" in proc.stdout and "test_acc" in proc.stdout
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["step", "step", "step", "eval"]
    assert all(r["world_size"] == 2 for r in rows)


def test_console_command_lists_subcommands():
    proc = subprocess.run([sys.executable, "-m", "dsgraph", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "train" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "dsgraph", "nonsense"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown subcommand 'nonsense'" in proc.stderr
