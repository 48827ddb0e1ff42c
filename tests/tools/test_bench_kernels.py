"""tools/benchmarks/bench_kernels.py on the CPU: which backends run, out-of-memory as a result, the JSON."""

import json

import pytest
import torch

from tools.benchmarks import bench_kernels as bench

CPU = torch.device("cpu")


def test_reference_never_runs_on_50m_edges():
    run, notes = bench.backends_to_run(None, CPU, 60_000_000, have_pyg=True)
    assert run == ["cpu", "pyg"] and "reference left out: 60,000,000 edges" in notes[0]
    run, _ = bench.backends_to_run("reference,cpu,pyg", CPU, 60_000_000, have_pyg=True)
    assert "reference" not in run
    run, notes = bench.backends_to_run(None, CPU, 49_999_999, have_pyg=False)
    assert run == ["reference", "cpu"] and "torch_geometric is not installed" in notes[0]
    run, notes = bench.backends_to_run("cuda,pyg", CPU, 1000, have_pyg=True)
    assert run == ["pyg"] and "cuda left out" in notes[0]
    with pytest.raises(SystemExit, match="unknown backend"):
        bench.backends_to_run("cudnn", CPU, 1000, have_pyg=True)


def _qkv():
    return [torch.randn(4, 2, 8, requires_grad=True) for _ in range(3)] + [torch.randn(4, 2, 8)]


def test_out_of_memory_is_a_result_and_other_errors_propagate():
    q, k, v, dy = _qkv()

    def oom(q, k, v):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 15.00 GiB")

    result = bench.time_backend(oom, q, k, v, dy, 1)
    assert result["oom"] is True and "Tried to allocate" in result["error"]

    def broken(q, k, v):
        raise RuntimeError("index out of range")

    with pytest.raises(RuntimeError, match="index out of range"):
        bench.time_backend(broken, q, k, v, dy, 1)


def test_oom_record_leaves_speedups_open():
    info = {
        "model_bytes_fwd": 1e9,
        "model_bytes_bwd": 2e9,
        "peak_gbs": 100.0,
        "graph": "g",
        "nodes": 4,
        "edges": 8,
        "max_in_degree": 2,
        "heads": 2,
        "dim": 8,
        "dtype": "bf16",
        "device": "cpu",
        "notes": [],
    }
    results = {"cuda": {"oom": False, "fwd": 0.01, "bwd": 0.02, "peak": 2**20}, "pyg": {"oom": True, "error": "oom"}}
    cuda = bench.record("cuda", results["cuda"], results, info)
    assert cuda["speedup_vs_pyg"] is None and cuda["fwd_roofline"] == pytest.approx(1e9 / 0.01 / 1e9 / 100.0)
    records = [cuda, bench.record("pyg", results["pyg"], results, info)]
    assert "| pyg | out of memory |" in bench.table(records)


def test_small_graph_end_to_end(tmp_path, capsys):
    out = tmp_path / "k.json"
    bench.main(["--graph", "rmat:8", "--dtype", "bf16", "--repeats", "1", "--threads", "1", "--json-out", str(out)])
    records = json.loads(out.read_text())["records"]
    by = {r["backend"]: r for r in records}
    assert set(by) >= {"reference", "cpu"} and not any(r["oom"] for r in records)
    assert by["reference"]["speedup_vs_reference"] == pytest.approx(1.0)
    assert by["cpu"]["fwd_ms"] > 0 and 0 < by["cpu"]["fwd_roofline"]
    assert "| cpu |" in capsys.readouterr().out
