"""tools/gpu/check.sh on the CPU: --help, the plan's budget on paper, a run with no time left that
still writes its verdict, a failing and a hanging step recorded while the next one runs, a failed
smoke step that stops the run, the compute-sanitizer command line, a results writer that hangs
replaced by a minimal verdict, and a rehearsal that fails naming a step that ran into its cap."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here starts processes

ROOT = Path(__file__).resolve().parents[2]
QUICK = ("install", "smoke", "memcheck", "racecheck", "bench_kernels", "train_strategies")


def _check(*args, timeout=120, **env):
    full_env = dict(os.environ, PYTHON=sys.executable, **{"CHECK_NO_WARMUP": "1", **env})
    cmd = ["bash", "tools/gpu/check.sh", *args]
    return subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)


def _plan(*args) -> dict[str, tuple[int, int, int]]:
    out = _check("--plan", *args).stdout.splitlines()
    assert out[0].split("\t") == ["step", "cap_s", "expected_gpu_s", "cumulative_expected_s"]
    return {line.split("\t")[0]: tuple(int(x) for x in line.split("\t")[1:]) for line in out[1:]}


def test_help_names_every_mode():
    out = subprocess.run(
        ["bash", "tools/gpu/check.sh", "--help"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert all(
        word in out
        for word in ("--prepare", "--quick", "--plan", "gpu_results.json", "DEADLINE_S", "compute-sanitizer")
    )


def test_the_quick_plan_ends_within_180_s_and_the_full_plan_within_420_s_on_paper():
    quick = _plan("--quick")
    assert tuple(quick)[:-2] == QUICK and quick["total"][0] == sum(t for s, (t, _, _) in quick.items() if s != "total")
    assert quick["total"][0] + 3 < 180  # every step's cap and the results writer's, all used up, and 3 s to kill
    assert 160 + quick["results"][0] + 3 < 180 and quick["total"][1] < 160 * 0.7  # the deadline; 30 % spare expected
    full = _plan()
    steps = [s for s in full if s not in ("results", "total")]
    assert steps[:5] == ["install", "smoke", "environment", "memcheck", "racecheck"]
    assert steps[5].startswith("bench_kernels")
    assert steps.index("train_strategies") < steps.index("kernel_tests") < steps.index("train_rest")
    # the steps are cut at DEADLINE_S (395 s); the results writer has its own 15 s (and 3 s to be killed)
    assert 395 + full["results"][0] + 3 < 420 and full["total"][1] < 395 * 0.8


def test_the_budget_page_shows_the_plan():
    page = (ROOT / "docs/gpu-check.md").read_text()
    for args in ((), ("--quick",)):
        for step, (timeout, planned, cumulative) in _plan(*args).items():
            name = f"`{step}`" + (" (optional)" if step == "profile" else "")
            if step != "total":
                assert f"| {name} | {timeout} | {planned} | {cumulative} |" in page, (args, step)


def test_a_run_without_time_leaves_every_step_out_and_fails(tmp_path):
    proc = _check(str(tmp_path), DEADLINE_S="0")
    assert proc.returncode == 1, proc.stdout[-2000:]
    results = json.loads((tmp_path / "gpu_results.json").read_text())
    assert not results["passed"] and results["checks"]["memcheck"]["detail"].startswith("left out")
    assert "gpu_check: FAILED" in (tmp_path / "gpu_check.log").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu_check.log", "gpu_results.json"]


def test_a_failing_and_a_hanging_step_are_recorded_and_the_next_runs(tmp_path):
    steps = {f"CHECK_CMD_{s}": "true" for s in QUICK}
    steps.update(
        CHECK_CMD_memcheck="sleep 60",
        CHECK_TIMEOUT_memcheck="5",
        CHECK_CMD_racecheck='"$PY" -c "raise RuntimeError(\'boom\')"',
        CHECK_CMD_bench_kernels='echo ran > "$LOG_DIR/bench.flag"',
    )
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


@pytest.mark.slow
def test_a_failed_smoke_step_stops_the_run_with_its_traceback(tmp_path):
    steps = {f"CHECK_CMD_{s}": f'touch "$LOG_DIR/ran.{s}"' for s in QUICK}
    steps["CHECK_CMD_smoke"] = '"$PY" -c "raise AssertionError(\'float32 y: relative error 3.1e-01\')"'
    proc = _check("--quick", str(tmp_path), **steps)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert sorted(p.name for p in tmp_path.glob("ran.*")) == ["ran.install"]
    checks = json.loads((tmp_path / "gpu_results.json").read_text())["checks"]
    assert checks["smoke"]["status"] == "FAILED" and "AssertionError: float32 y" in checks["smoke"]["log_tail"]
    assert all(checks[s]["detail"].startswith("not run: the smoke step failed") for s in QUICK[2:])


def _fake_sanitizer(folder: Path, help_text: str) -> Path:
    folder.mkdir(parents=True)
    path = folder / "compute-sanitizer"
    path.write_text(f"#!/bin/sh\necho '{help_text}'\n")
    path.chmod(0o755)
    return path


@pytest.mark.slow
def test_the_sanitizer_line_judges_the_kernels_only(tmp_path):
    on_path = _fake_sanitizer(tmp_path / "bin", "--tool --report-api-errors arg --kernel-name arg")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    line = _check("--sanitizer-line", "memcheck", **env).stdout.strip()
    flags = "--tool memcheck --error-exitcode 97 --report-api-errors no --kernel-name kns=sa_"
    assert line == f"PYTORCH_NO_CUDA_MEMORY_CACHING=1 {on_path} {flags}"
    old = _fake_sanitizer(tmp_path / "cuda/bin", "--tool --kernel-name arg")  # an older one, in the toolkit only
    line = _check("--sanitizer-line", "racecheck", PATH="/usr/bin:/bin", CUDA_HOME=str(tmp_path / "cuda")).stdout
    line = line.strip()
    assert line == f"PYTORCH_NO_CUDA_MEMORY_CACHING=1 {old} --tool racecheck --error-exitcode 97 --kernel-name kns=sa_"
    if not list(Path("/usr/local").glob("cuda*/bin/compute-sanitizer")):
        line = _check("--sanitizer-line", "memcheck", PATH="/usr/bin:/bin", CUDA_HOME=str(tmp_path / "none")).stdout
        assert "compute-sanitizer: not on PATH" in line and "exit 127" in line


@pytest.mark.slow
def test_a_planted_slow_step_fails_the_rehearsal_naming_it(tmp_path):
    steps = {f"CHECK_CMD_{s}": "true" for s in QUICK}
    steps.update(CHECK_CMD_bench_kernels="sleep 30", CHECK_TIMEOUT_bench_kernels="3")
    proc = _check("--rehearse", "--quick", str(tmp_path), **steps)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "rehearsal: step bench_kernels would be cut: it ran into its cap" in proc.stdout
    assert "rehearsal: step train_strategies" not in proc.stdout and "rehearsal: FAILED" in proc.stdout
    table = proc.stdout[proc.stdout.index("step ") :]
    assert all(s in table for s in QUICK)
    steps.pop("CHECK_CMD_bench_kernels")
    steps.update(CHECK_CMD_bench_kernels="true")
    assert _check("--rehearse", "--quick", str(tmp_path), **steps).returncode == 0


@pytest.mark.slow
def test_a_wait_for_a_graph_ends_when_its_generator_dies(tmp_path):
    (tmp_path / "warm").mkdir()
    script = """source <(sed -n '/^wait_graph()/,/^}/p' tools/gpu/check.sh)
        (echo 'MemoryError'; exit 1) > "$WORK/warm/rmat_22.txt" & echo $! > "$WORK/warm/rmat_22.pid"
        (sleep 1; touch "$WORK/warm/rmat_20.done") & echo $! > "$WORK/warm/rmat_20.pid"
        wait_graph rmat:20 && echo "rmat:20 ready"; wait_graph rmat:22; echo "rmat:22 exit $?"; wait_graph rmat:9"""
    env = dict(os.environ, WORK=str(tmp_path))
    proc = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert "rmat:20 ready" in proc.stdout and "rmat:22 exit 3" in proc.stdout and proc.returncode == 3
    assert "the generator of rmat:22 ended without writing it" in proc.stdout and "MemoryError" in proc.stdout
    assert "the warm-up does not generate rmat:9" in proc.stdout
