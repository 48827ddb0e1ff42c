"""tools/gpu/check.sh on the CPU: --help, and a run with no time left that still writes its verdict."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_help_names_both_modes():
    out = subprocess.run(["bash", "tools/gpu/check.sh", "--help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "--prepare" in out and "gpu_results.json" in out and "DEADLINE_S" in out


def test_a_run_without_time_leaves_every_step_out_and_fails(tmp_path):
    env = dict(os.environ, DEADLINE_S="12", PYTHON=sys.executable)
    proc = subprocess.run(["bash", "tools/gpu/check.sh", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout[-2000:]
    results = json.loads((tmp_path / "gpu_results.json").read_text())
    assert not results["passed"] and results["checks"]["training"]["detail"].startswith("left out")
    assert "gpu_check: FAILED" in (tmp_path / "gpu_check.log").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu_check.log", "gpu_results.json"]
