"""tools/gpu/results.py and tools/benchmarks/save_dataset.py on the CPU: verdicts and figures from pieces."""

import json

import torch

from dsgraph.agp.profile import with_collectives_from
from dsgraph.agp.synthetic import linear_profile
from dsgraph.graph import load_dataset

from tools.gpu import results
from tools.benchmarks import save_dataset
PER_BYTE = {"all_gather": 1e-9, "reduce_scatter": 1e-9, "all_to_all": 2e-9, "all_to_all_uneven": 2e-9}
STEPS = results.FULL_PLAN
SANITIZER = "========= {0}\n1 passed, 5 deselected in 30.0s\n"


def _kernel(backend, edges, **kw):
    base = {"graph": "rmat22", "nodes": 4_194_304, "edges": edges, "dtype": "bf16", "backend": backend, "oom": False, "fwd_ms": 10.0,
            "fwd_bwd_ms": 40.0, "fwd_roofline": 0.42, "peak_gbs": 4300.0, "model_bytes_fwd": 1e10, "speedup_vs_pyg": 7.5,
            "speedup_vs_reference": None}  # fmt: skip
    return {**base, **kw}


def _pieces(tmp_path, edges=60_000_000):
    log, work = tmp_path / "log", tmp_path / "work"
    log.mkdir(parents=True), work.mkdir(parents=True)
    (work / "steps.tsv").write_text("".join(f"{s}\t0\t12\n" for s in STEPS) + "bench_models_rmat20\tskip\t0\n")
    (work / "environment.json").write_text(json.dumps({"cuda_available": True, "missing": [], "gpu": "NVIDIA H200"}))
    (work / "kernel_tests.txt").write_text("...\n130 passed in 51.02s\n")
    (work / "memcheck.txt").write_text(SANITIZER.format("ERROR SUMMARY: 0 errors"))
    (work / "racecheck.txt").write_text(SANITIZER.format("RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"))
    for name in ("train_strategies", "train_rest"):
        (log / f"{name}.json").write_text(json.dumps({"passed": True, "runs": [{"name": "cora-bf16-ag", "seconds": 20.0,
                                          "check": {"status": "PASSED", "max_rel_diff": 3e-3, "reason": ""}}]}))  # fmt: skip
    pyg = _kernel("pyg", edges, oom=True, error="CUDA out of memory")
    (log / "kernels.json").write_text(json.dumps({"records": [_kernel("cuda", edges, speedup_vs_pyg=None), pyg]}))
    models = {"dataset": "rmat22", "nodes": 4_194_304, "edges": edges, "dtype": "bf16",
              "dsgraph": {"status": "ok", "wall_step_s": 0.5, "trainer_step_time_s": 0.45, "peak_mem_mb": 30_000.0},
              "pyg": {"status": "oom", "oom": True, "error": "CUDA out of memory", "peak_mem_mb_before_oom": 130_000.0}}  # fmt: skip
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
    assert out["figures"]["model_rmat22"]["pyg_status"] == "oom" and out["figures"]["model_rmat22"]["dsgraph_step_ms"] == 500.0
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
    (work / "racecheck.txt").write_text(SANITIZER.format("RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)"))
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
    assert torch.equal(a.rowptr, b.rowptr) and torch.equal(a.col, b.col) and torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
