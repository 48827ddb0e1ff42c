"""tools/gpu/results.py and tools/benchmarks/save_dataset.py on the CPU: verdicts and figures from pieces."""

import json
from pathlib import Path

import pytest
import torch

from dsgraph.agp.profile import with_collectives_from
from dsgraph.agp.synthetic import linear_profile
from dsgraph.graph import load_dataset
from tools.benchmarks import save_dataset
from tools.gpu import results

PER_BYTE = {"all_gather": 1e-9, "reduce_scatter": 1e-9, "all_to_all": 2e-9, "all_to_all_uneven": 2e-9}
STEPS = results.FULL_PLAN
SANITIZER = "========= {0}\n1 passed, 5 deselected in 30.0s\n"


def _kernel(backend, edges, **kw):
    base = {
        "graph": "rmat22",
        "nodes": 4_194_304,
        "edges": edges,
        "dtype": "bf16",
        "backend": backend,
        "oom": False,
        "fwd_ms": 10.0,
        "fwd_bwd_ms": 40.0,
        "fwd_roofline": 0.42,
        "peak_gbs": 4300.0,
        "model_bytes_fwd": 1e10,
        "speedup_vs_pyg": 7.5,
        "speedup_vs_reference": None,
    }
    return {**base, **kw}


def _pieces(tmp_path, edges=60_000_000):
    log, work = tmp_path / "log", tmp_path / "work"
    log.mkdir(parents=True), work.mkdir(parents=True)
    (work / "steps.tsv").write_text("".join(f"{s}\t0\t12\n" for s in STEPS) + "bench_models_rmat20\tskip\t0\n")
    (work / "environment.json").write_text(json.dumps({"cuda_available": True, "missing": [], "gpu": "NVIDIA H200"}))
    (work / "kernel_tests.txt").write_text("...\n130 passed in 51.02s\n")
    (work / "smoke.txt").write_text("smoke: cuda: float32: ...\nsmoke: PASSED in 9.8 s\n")
    (work / "memcheck.txt").write_text(SANITIZER.format("ERROR SUMMARY: 0 errors"))
    (work / "racecheck.txt").write_text(
        SANITIZER.format("RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)")
    )
    for name in ("train_strategies", "train_rest"):
        (log / f"{name}.json").write_text(
            json.dumps(
                {
                    "passed": True,
                    "runs": [
                        {
                            "name": "cora-bf16-ag",
                            "seconds": 20.0,
                            "check": {"status": "PASSED", "max_rel_diff": 3e-3, "reason": ""},
                        }
                    ],
                }
            )
        )
    pyg = _kernel("pyg", edges, oom=True, error="CUDA out of memory")
    (log / "kernels.json").write_text(json.dumps({"records": [_kernel("cuda", edges, speedup_vs_pyg=None), pyg]}))
    models = {
        "dataset": "rmat22",
        "nodes": 4_194_304,
        "edges": edges,
        "dtype": "bf16",
        "dsgraph": {"status": "ok", "wall_step_s": 0.5, "trainer_step_time_s": 0.45, "peak_mem_mb": 30_000.0},
        "pyg": {"status": "oom", "oom": True, "error": "CUDA out of memory", "peak_mem_mb_before_oom": 130_000.0},
    }
    (log / "models_rmat22.json").write_text(json.dumps(models))
    kw = dict(attention_s_per_edge_head=1e-10, rest_s_per_mac=1e-13, collective_s_per_byte=PER_BYTE, dtype="bfloat16")
    merged = with_collectives_from(linear_profile(max_ranks=1, **kw), linear_profile(max_ranks=8, **kw), 8)
    merged.save(str(log / "agp_profile_cuda_bf16.json"))
    return log, work


def test_all_pieces_pass_and_fill_the_table(tmp_path, capsys):
    log, work = _pieces(tmp_path)
    assert results.main(["--log-dir", str(log), "--work-dir", str(work)]) == 0
    out = json.loads((log / "gpu_results.json").read_text())
    assert out["passed"] and set(out["checks"]) == set(STEPS) and out["figures"]["training"][0]["status"] == "PASSED"
    assert out["figures"]["kernels"]["fwd_roofline_bf16_50M"]["fwd_roofline"] == 0.42
    assert out["figures"]["kernels"]["fwd_bwd_speedup_vs_pyg"][0]["pyg"] == "out of memory"
    assert (
        out["figures"]["model_rmat22"]["pyg_status"] == "oom"
        and out["figures"]["model_rmat22"]["dsgraph_step_ms"] == 500.0
    )
    printed = capsys.readouterr().out
    assert "42.0% (10.00 ms)" in printed and "PyG-style: out of memory" in printed and "gpu_check: PASSED" in printed


def test_a_small_graph_a_skip_or_a_failed_step_fails(tmp_path):
    log, work = _pieces(tmp_path, edges=16_000_000)
    assert results.main(["--log-dir", str(log), "--work-dir", str(work)]) == 1
    checks = json.loads((log / "gpu_results.json").read_text())["checks"]
    assert checks["bench_kernels_rmat22"]["status"] == "FAILED" and checks["bench_kernels"]["status"] == "PASSED"
    assert checks["train_rest"]["status"] == "PASSED"
    log, work = _pieces(tmp_path / "b")
    (work / "kernel_tests.txt").write_text("128 passed, 2 skipped in 50.00s\n")
    (work / "racecheck.txt").write_text(
        SANITIZER.format("RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)")
    )
    (work / "steps.tsv").write_text((work / "steps.tsv").read_text().replace("train_rest\t0", "train_rest\t124"))
    assert results.main(["--log-dir", str(log), "--work-dir", str(work)]) == 1
    checks = json.loads((log / "gpu_results.json").read_text())["checks"]
    assert checks["kernel_tests"]["status"] == "FAILED" and checks["train_rest"]["status"] == "FAILED"
    assert checks["train_rest"]["detail"].startswith("timed out after 12 s")
    assert checks["racecheck"]["status"] == "FAILED" and checks["memcheck"]["status"] == "PASSED"


def test_a_broken_piece_fails_its_step_only(tmp_path):
    log, work = _pieces(tmp_path)
    (log / "kernels.json").write_text(json.dumps({"records": [{"backend": "cuda"}]}))  # no "oom" key: KeyError inside
    assert results.main(["--log-dir", str(log), "--work-dir", str(work)]) == 1
    checks = json.loads((log / "gpu_results.json").read_text())["checks"]
    assert checks["bench_kernels"]["status"] == "FAILED" and "could not judge" in checks["bench_kernels"]["detail"]
    assert checks["train_strategies"]["status"] == "PASSED"
    assert "error" in json.loads((log / "gpu_results.json").read_text())["figures"]["kernels"]


def test_a_surprise_exception_still_writes_a_minimal_verdict(tmp_path, monkeypatch):
    log, work = _pieces(tmp_path)

    def surprise(*args):
        raise ZeroDivisionError("a surprise")

    monkeypatch.setattr(results, "check_statuses", surprise)
    assert results.main(["--log-dir", str(log), "--work-dir", str(work)]) == 1
    out = json.loads((log / "gpu_results.json").read_text())
    assert out["minimal"] and not out["passed"] and "ZeroDivisionError: a surprise" in out["reason"]
    assert out["steps"]["memcheck"]["rc"] == "0"


def test_a_quick_plan_judges_only_its_steps(tmp_path):
    log, work = _pieces(tmp_path)
    plan = "install memcheck racecheck bench_kernels train_strategies"
    assert results.main(["--log-dir", str(log), "--work-dir", str(work), "--plan", plan]) == 0
    assert list(json.loads((log / "gpu_results.json").read_text())["checks"]) == plan.split()


def test_save_dataset_round_trip(tmp_path):
    path = tmp_path / "g.npz"
    assert save_dataset.main(["rmat:8", str(path)]) == 0
    a, b = load_dataset("rmat:8"), load_dataset(str(path))
    assert (
        torch.equal(a.rowptr, b.rowptr)
        and torch.equal(a.col, b.col)
        and torch.equal(a.x, b.x)
        and torch.equal(a.y, b.y)
    )


def test_an_optional_step_never_fails_the_check_and_a_stopped_run_says_why(tmp_path):
    log, work = _pieces(tmp_path)
    (work / "steps.tsv").write_text((work / "steps.tsv").read_text().replace("profile\t0", "profile\t124"))
    assert results.main(["--log-dir", str(log), "--work-dir", str(work), "--optional", "profile"]) == 0
    checks = json.loads((log / "gpu_results.json").read_text())["checks"]
    assert checks["profile"]["status"] == "FAILED" and checks["profile"]["optional"]
    assert results.main(["--log-dir", str(log), "--work-dir", str(work), "--optional", ""]) == 1
    (work / "steps.tsv").write_text("install\t0\t8\nsmoke\t1\t9\n" + "".join(f"{s}\tstop\t0\n" for s in STEPS[2:]))
    assert results.main(["--log-dir", str(log), "--work-dir", str(work)]) == 1
    checks = json.loads((log / "gpu_results.json").read_text())["checks"]
    assert checks["smoke"]["status"] == "FAILED"
    assert checks["kernel_tests"]["detail"].startswith("not run: the smoke step failed")


def test_the_environment_records_the_versions_and_the_stream_protocol():
    env = results.environment()
    assert {"numba", "numpy", "torch", "cupy", "deepspeed"} <= set(env)
    assert isinstance(env["torch_stream_has_cuda_stream"], bool)


# written by results.py from this file's _pieces and a smoke step (a recorded file, not a GPU run's figures)
RECORDED = Path(__file__).parent / "data" / "gpu_check_out"


def _docs(tmp_path) -> Path:
    docs = tmp_path / "docs"
    (docs / "benchmarks").mkdir(parents=True), (docs / "agp").mkdir()
    nav = "nav:\n  - Benchmarks:\n      - Overview: benchmarks/index.md\n      - 2026-12-03 X: x.md\n"
    (tmp_path / "mkdocs.yml").write_text(nav)
    return docs


def test_a_page_from_a_recorded_results_file(tmp_path, capsys):
    docs = _docs(tmp_path)
    assert results.main(["--page", str(RECORDED), "--docs", str(docs)]) == 0
    page = (docs / "benchmarks" / "2026-12-04-gpu-check.md").read_text()
    assert page.startswith("# 2026-12-04: the GPU check") and "NVIDIA H200" in page and "cupy 14.2.0" in page
    assert "60,000,000 edges, H = 8, D = 16): 10.00 ms, 42.0% of the no-reuse HBM roofline at 4,300 GB/s" in page
    assert "| cora-bf16-ag | PASSED | 3.00e-03 |" in page and "| `profile` | PASSED (optional) | 0 | 12 |" in page
    assert "- `racecheck`: PASSED: racecheck: RACECHECK SUMMARY: 0 hazards" in page
    assert "[2026-12-04-h200_bf16_profile.json](../agp/2026-12-04-h200_bf16_profile.json)" in page
    saved = docs / "agp" / "2026-12-04-h200_bf16_profile.json"
    assert saved.read_bytes() == (RECORDED / "agp_profile_cuda_bf16.json").read_bytes()
    nav = (tmp_path / "mkdocs.yml").read_text()
    assert (
        "- Overview: benchmarks/index.md\n      - 2026-12-04 The GPU check: benchmarks/2026-12-04-gpu-check.md\n" in nav
    )


def test_no_page_from_a_rehearsal(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    recorded = json.loads((RECORDED / "gpu_results.json").read_text())
    (out / "gpu_results.json").write_text(json.dumps({**recorded, "rehearsal": True}))
    with pytest.raises(SystemExit, match="a CPU rehearsal, not a GPU run's figures"):
        results.main(["--page", str(out), "--docs", str(_docs(tmp_path))])
