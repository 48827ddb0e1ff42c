"""tools/gpu/check.sh on the CPU: --help, the plan's budget on paper, a run with no time left that
still writes its verdict, a failing and a hanging step recorded while the next one runs, and a
results writer that hangs replaced by a minimal verdict."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here starts processes

ROOT = Path(__file__).resolve().parents[2]
QUICK = ("install", "memcheck", "racecheck", "bench_kernels", "train_strategies")


def _check(*args, timeout=120, **env):
    full_env = dict(os.environ, PYTHON=sys.executable, **env)
    return subprocess.run(["bash", "tools/gpu/check.sh", *args], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)


def _plan(*args) -> dict[str, tuple[int, int, int]]:
    out = _check("--plan", *args).stdout.splitlines()
    assert out[0].split("\t") == ["step", "timeout_s", "planned_s", "cumulative_planned_s"]
    return {line.split("\t")[0]: tuple(int(x) for x in line.split("\t")[1:]) for line in out[1:]}


def test_help_names_every_mode():
    out = subprocess.run(["bash", "tools/gpu/check.sh", "--help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert all(word in out for word in ("--prepare", "--quick", "--plan", "gpu_results.json", "DEADLINE_S", "compute-sanitizer"))


def test_the_quick_plan_fits_two_minutes_and_the_full_plan_five_on_paper():
    quick = _plan("--quick")
    assert tuple(quick)[:-2] == QUICK and quick["total"][0] == sum(t for s, (t, _, _) in quick.items() if s != "total")
    assert quick["total"][0] <= 120 - 5  # every step's timeout and the results writer's, all used up, with 5 s to spare
    full = _plan()
    steps = [s for s in full if s not in ("results", "total")]
    assert steps[:4] == ["install", "environment", "memcheck", "racecheck"] and steps[4].startswith("bench_kernels")
    assert steps.index("train_strategies") < steps.index("kernel_tests") < steps.index("train_rest")
    # the steps are cut at DEADLINE_S (270 s); the results writer has its own 15 s (and 3 s to be killed)
    assert full["total"][1] <= 270 + full["results"][1] and 270 + full["results"][0] + 3 < 300


def test_the_budget_page_shows_the_plan():
    page = (ROOT / "docs/gpu-check.md").read_text()
    for args in ((), ("--quick",)):
        for step, (timeout, planned, cumulative) in _plan(*args).items():
            if step != "total":
                assert f"| `{step}` | {timeout} | {planned} | {cumulative} |" in page, (args, step)


def test_a_run_without_time_leaves_every_step_out_and_fails(tmp_path):
    proc = _check(str(tmp_path), DEADLINE_S="0")
    assert proc.returncode == 1, proc.stdout[-2000:]
    results = json.loads((tmp_path / "gpu_results.json").read_text())
    assert not results["passed"] and results["checks"]["memcheck"]["detail"].startswith("left out")
    assert "gpu_check: FAILED" in (tmp_path / "gpu_check.log").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu_check.log", "gpu_results.json"]


def test_a_failing_and_a_hanging_step_are_recorded_and_the_next_runs(tmp_path):
    steps = {f"CHECK_CMD_{s}": "true" for s in QUICK}
    steps.update(CHECK_CMD_memcheck="sleep 60", CHECK_TIMEOUT_memcheck="5",
                 CHECK_CMD_racecheck='"$PY" -c "raise RuntimeError(\'boom\')"',
                 CHECK_CMD_bench_kernels='echo ran > "$LOG_DIR/bench.flag"')  # fmt: skip
    proc = _check("--quick", str(tmp_path), **steps)
    assert proc.returncode == 1, proc.stdout[-2000:]
    checks = json.loads((tmp_path / "gpu_results.json").read_text())["checks"]
    assert checks["memcheck"]["exit_code"] == "124" and checks["memcheck"]["detail"].startswith("timed out after")
    assert checks["racecheck"]["exit_code"] == "1" and "RuntimeError: boom" in checks["racecheck"]["log_tail"]
    assert (tmp_path / "bench.flag").read_text() == "ran\n" and checks["bench_kernels"]["exit_code"] == "0"
    assert checks["train_strategies"]["exit_code"] == "0" and checks["install"]["status"] == "PASSED"


def test_a_hanging_results_writer_is_replaced_by_a_minimal_verdict(tmp_path):
    steps = {f"CHECK_CMD_{s}": "true" for s in QUICK}
    proc = _check("--quick", str(tmp_path), CHECK_CMD_results="sleep 60", CHECK_TIMEOUT_results="2", **steps)
    assert proc.returncode == 1, proc.stdout[-2000:]
    results = json.loads((tmp_path / "gpu_results.json").read_text())
    assert results["minimal"] and not results["passed"] and results["reason"] == "results writer exit 124"
    assert [s["step"] for s in results["steps"]] == list(QUICK) and all(s["exit_code"] == "0" for s in results["steps"])
