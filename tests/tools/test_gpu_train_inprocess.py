"""tools/gpu/train_inprocess.py on the CPU: the order and groups, the settings the CLI would give,
the per-run time limit, a run that raises recorded while the tool goes on, the partial results
file, and a real in-process run compared with itself (another run before it in the same process)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.gpu import train_check
from tools.gpu import train_inprocess as tool

ROOT = Path(__file__).resolve().parents[2]


def test_the_bf16_run_of_every_strategy_comes_first_and_the_groups_split_all_runs():
    specs = tool.ordered_specs()
    assert [(s.strategy, s.dtype) for s in specs[:6]] == [(s, "bf16") for s in train_check.STRATEGIES]
    first = [s for s in specs if tool.in_group(s, "strategies")]
    rest = [s for s in specs if tool.in_group(s, "rest")]
    assert first == specs[:6] and first + rest == specs and len(specs) == 15
    assert {s.name for s in specs} == {s.name for s in train_check.run_specs()}


@pytest.mark.parametrize(
    "name, mode, strategy",
    [
        ("cora-bf16-ag", "full", "ag"),
        ("cora-fp32-sampled", "sampled", None),
        ("cora-bf16-isolated", "isolated", None),
        ("cora-bf16-auto", "full", "auto"),
    ],
)
def test_settings_are_the_command_lines(tmp_path, name, mode, strategy):
    [spec] = [s for s in tool.ordered_specs() if s.name == name]
    ds, cfg = tool.run_settings(spec, tmp_path, "cpu")
    assert cfg.mode == mode and cfg.epochs == 5 and cfg.eval_every == 5 and cfg.seed == 0 and cfg.backend == "cpu"
    assert cfg.metrics_out == str(tmp_path / f"{name}.jsonl") and ds["bf16"]["enabled"] is (spec.dtype == "bf16")
    if strategy:
        assert cfg.strategy == strategy
    if strategy == "auto":
        assert cfg.agp.profile.endswith("dgx_h100_8gpu_bf16_profile.json")


def test_a_run_past_its_time_limit_raises():
    began = time.monotonic()
    with pytest.raises(tool.RunTimeout, match="time limit of 0 s"):
        with tool.time_limit(0.2):
            time.sleep(5)
    assert time.monotonic() - began < 2


def test_a_run_that_raises_is_recorded(tmp_path, monkeypatch):
    import torch

    def broken(*args):
        raise RuntimeError("a surprise in set-up")

    monkeypatch.setattr(tool, "run_settings", broken)
    result = tool.train_one(tool.ordered_specs()[0], tmp_path, torch.device("cpu"), 30)
    assert (
        result["returncode"] == 1
        and "RuntimeError: a surprise in set-up" in result["log_tail"]
        and result["losses"] == []
    )


def test_the_partial_file_names_the_run_in_progress(tmp_path):
    specs = tool.ordered_specs()[:3]
    done = {**tool.not_run(specs[0], ""), "returncode": 0, "losses": [1.0]}
    assert not tool.write_report(tmp_path / "t.json", "cpu", [done], None, specs[1:])
    runs = json.loads((tmp_path / "t.json").read_text())["runs"]
    assert [r["log_tail"] for r in runs[1:]] == ["running when the process ended", "not started"]
    assert runs[0]["returncode"] == 0 and runs[1]["returncode"] is None and runs[2]["returncode"] is None


def _tool(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="2")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.gpu.train_inprocess",
            "--device",
            "cpu",
            "--cora-epochs",
            "2",
            "--threads",
            "2",
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_a_cpu_run_matches_itself_after_another_run(tmp_path):
    """The reference holds ag then a2a from one process; a2a alone in a fresh process matches it."""
    ref, out = tmp_path / "ref.json", tmp_path / "out.json"
    proc = _tool("--only", "cora-fp32-ag,cora-fp32-a2a", "--out", str(ref))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = json.loads(ref.read_text())["runs"]
    assert [r["name"] for r in runs] == ["cora-fp32-ag", "cora-fp32-a2a"] and all(len(r["losses"]) == 2 for r in runs)
    proc = _tool("--only", "cora-fp32-a2a", "--out", str(out), "--reference", str(ref))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [run] = json.loads(out.read_text())["runs"]
    assert run["check"]["status"] == "PASSED" and run["check"]["max_rel_diff"] < 1e-6
