"""A run's memory predicted before its graph is loaded (``dsgraph/agp/run_memory.py``): refused with
the prediction, the limit and what would fit; checkpointing turned on when only that fits; the
prediction in the metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from dsgraph.agp.run_memory import (
    HEAP_RETAINED,
    LIMIT_ENV,
    LOADED_TERMS,
    MB,
    PROCESS_FLOOR_MB,
    alternatives,
    fit_run,
    predict_run,
)
from dsgraph.graph.partition_choice import EDGE_BYTES
from dsgraph.train.config import DsgraphConfig

BF16 = {"bf16": {"enabled": True}}
GENERAL = dict(
    dataset="rmat:18",
    strategy="halo",
    model={"block": "transformer", "global_attention": "linear"},
)


def _cfg(**changes) -> DsgraphConfig:
    return DsgraphConfig.from_dict({**GENERAL, **changes})


def test_terms_sum_to_the_total_and_grow_with_the_graph():
    small, large = predict_run(_cfg(dataset="rmat:16"), 2, 2), predict_run(_cfg(dataset="rmat:18"), 2, 2)
    assert small.total_bytes == pytest.approx(sum(small.terms.values())) and small.step_bytes > small.loading
    assert small.terms["process floor"] == large.terms["process floor"]
    graph_share = [r.total_bytes - r.terms["process floor"] - r.terms["optimizer states"] for r in (small, large)]
    assert graph_share[1] == pytest.approx(4 * graph_share[0], rel=0.05)  # 4x the nodes and edges
    fp32 = predict_run(_cfg(dataset="rmat:18"), 4, 2)
    assert fp32.terms["activations"] > 1.5 * large.terms["activations"]  # bool masks and fp32 copies stay
    assert predict_run(_cfg(mode="isolated"), 2, 2) is None  # a chunk at a time: not this model's


def test_an_accelerator_holds_the_model_terms_without_the_process_and_the_cpu_kernels():
    cpu, gpu = predict_run(_cfg(), 2, 2), predict_run(_cfg(), 2, 2, device="cuda")
    cpu_only = ("process floor", "kept probabilities", "kernel transposes", "kernel backward", "allocator heap")
    assert set(cpu.terms) - set(gpu.terms) == set(cpu_only)
    for name, value in gpu.terms.items():  # the CUDA op keeps an fp32 copy of each block's output besides it
        copies = 2 * 2**17 * 64 * 4 if name == "activations" else 0  # 2 blocks, 2^17 rows, d = 64, fp32
        assert value == pytest.approx(cpu.terms[name] + copies), name


def test_the_heap_is_counted_while_a_rank_s_row_tensors_are_under_glibc_s_mmap_ceiling():
    small, large = predict_run(_cfg(dataset="rmat:18"), 2, 2), predict_run(_cfg(dataset="rmat:20"), 2, 2)
    step = [name for name in small.terms if name not in (*LOADED_TERMS, "allocator heap")]
    assert "activations" in step and "kernel backward" in step and "graph" not in step
    assert small.terms["allocator heap"] == pytest.approx(HEAP_RETAINED * sum(small.terms[n] for n in step))
    assert large.terms["allocator heap"] == 0  # 2^19 rows x 64 x 2 bytes = 64 MiB: mapped blocks
    fp32 = predict_run(_cfg(dataset="rmat:18"), 4, 2)  # 2^17 rows x 64 x 4 bytes = 32 MiB: mapped as well
    assert fp32.terms["allocator heap"] == 0


def test_a_run_over_its_limit_is_refused_with_the_prediction_the_limit_and_what_fits(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "1700")
    cfg = _cfg(auto_checkpoint=False)
    predicted = predict_run(cfg, 2, 2).total_mb
    with pytest.raises(ValueError) as err:
        fit_run(cfg, BF16, 2)
    message = str(err.value)
    assert f"predicted to peak at {predicted:,.0f} MB per rank (halo on 2 ranks" in message
    assert f"over the limit of 1,700 MB per rank (${LIMIT_ENV})" in message
    assert "ranks: about" in message and "checkpointing" in message and '"mode": "isolated"' in message


def test_checkpointing_is_turned_on_when_only_it_fits(monkeypatch):
    ranges = {"partition_method": "balanced"}  # no METIS phase before training: the step sets the peak
    cfg = _cfg(parallel=ranges)
    plain = predict_run(cfg, 2, 2).total_mb
    nested = predict_run(_cfg(parallel=ranges, checkpoint_activations=True, checkpoint_nested=True), 2, 2).total_mb
    assert nested < 0.95 * plain
    monkeypatch.setenv(LIMIT_ENV, str((plain + nested) / 2))
    fitted, note = fit_run(cfg, BF16, 2)
    assert fitted.checkpoint_activations and fitted.checkpoint_nested
    assert "activation checkpointing turned on (nested)" in note and f"{nested:,.0f} MB" in note
    monkeypatch.setenv(LIMIT_ENV, str(plain + 1))
    assert fit_run(cfg, BF16, 2) == (cfg, "")
    monkeypatch.setenv(LIMIT_ENV, str((plain + nested) / 2))
    with pytest.raises(ValueError, match="over the limit"):
        fit_run(_cfg(parallel=ranges, auto_checkpoint=False), BF16, 2)


def test_metis_on_rank_0_before_training_is_predicted_where_the_rows_are_split_by_metis():
    halo = predict_run(_cfg(dataset="rmat:20"), 2, 2)  # GP-Halo's default split: METIS on rank 0
    edges = int(0.94 * 16 * 2**20) + 2**20  # the R-MAT estimate, self loops included
    assert halo.loading == pytest.approx(PROCESS_FLOOR_MB * MB + EDGE_BYTES * edges, rel=1e-3)
    assert halo.loading > halo.step_bytes and halo.total_bytes == halo.loading
    assert any(line.startswith("METIS on rank 0") for line in halo.lines())
    for cfg, ranks in (
        (_cfg(dataset="rmat:20", strategy="ag"), 2),  # a balanced split
        (_cfg(dataset="rmat:20", parallel={"partition_method": "balanced"}), 2),
        (_cfg(dataset="rmat:20"), 1),
    ):
        other = predict_run(cfg, 2, ranks)
        assert other.loading == 0 and other.total_bytes == other.step_bytes


def test_a_split_whose_metis_phase_does_not_fit_becomes_balanced_unless_metis_was_chosen(monkeypatch):
    halo = predict_run(_cfg(dataset="rmat:20"), 2, 2)
    monkeypatch.setenv(LIMIT_ENV, str((halo.loading / MB + halo.step_bytes / MB) / 2))
    fitted, note = fit_run(_cfg(dataset="rmat:20"), BF16, 2)
    assert fitted.parallel.partition_method == "balanced"
    assert f"METIS on rank 0 is predicted to peak at {halo.loading / MB:,.0f} MB, over the limit" in note
    assert "balanced ranges instead" in note
    with pytest.raises(ValueError) as err:  # chosen by the user: refused, the balanced split named
        fit_run(_cfg(dataset="rmat:20", parallel={"partition_method": "metis"}), BF16, 2)
    assert 'a balanced row split ("parallel": {"partition_method": "balanced"}): about' in str(err.value)
    monkeypatch.setenv(LIMIT_ENV, str(halo.step_bytes / MB - 1))  # the balanced split does not fit either
    with pytest.raises(ValueError) as err:
        fit_run(_cfg(dataset="rmat:20", auto_checkpoint=False), BF16, 2)
    assert str(err.value).startswith("METIS on rank 0 is predicted") and "; this run is predicted" in str(err.value)
    fits = alternatives(_cfg(dataset="rmat:20"), halo, 2, 2, halo.step_bytes / MB + 1)
    assert fits[0].startswith('a balanced row split ("parallel": {"partition_method": "balanced"}, which training')


def test_the_limit_comes_from_the_environment_the_config_or_the_machine(monkeypatch):
    from dsgraph.agp.run_memory import memory_limit_mb

    monkeypatch.delenv(LIMIT_ENV, raising=False)
    assert memory_limit_mb(_cfg(memory_limit_mb=1234), 2) == (1234.0, "memory_limit_mb")
    machine, source = memory_limit_mb(_cfg(), 2)
    assert 0 < machine * MB * 2 <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") and "2 ranks" in source
    monkeypatch.setenv(LIMIT_ENV, "many")
    with pytest.raises(ValueError, match=LIMIT_ENV):
        memory_limit_mb(_cfg(), 2)
    with pytest.raises(ValueError, match="memory_limit_mb"):
        _cfg(memory_limit_mb=-1)


def _one_rank(tmp_path, limit: str, **section):
    config = tmp_path / "ds.json"
    settings = dict(hidden=16, heads=2, layers=1, epochs=1, eval_every=1000, **section)
    config.write_text(
        json.dumps({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Adam"}, "dsgraph": settings})
    )
    env = {
        **os.environ,
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "DSGRAPH_CACHE": str(tmp_path / "cache"),
        LIMIT_ENV: limit,
    }
    from dsgraph.comm.ports import free_port

    env["MASTER_PORT"] = str(free_port())
    metrics = tmp_path / "metrics.jsonl"
    cmd = [sys.executable, "launch/train.py", "--deepspeed_config", str(config), "--metrics-out", str(metrics)]
    began = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    return proc, time.monotonic() - began, metrics


@pytest.mark.slow
def test_train_refuses_before_loading_the_graph(tmp_path):
    """rmat:20 is not in the (empty) cache: refused before anything builds it, in seconds."""
    proc, seconds, _ = _one_rank(tmp_path, "300", dataset="rmat:20", strategy="ag", auto_checkpoint=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "predicted to peak at" in proc.stderr and "over the limit of 300 MB per rank" in proc.stderr
    assert "loading the graph" not in proc.stdout and not (tmp_path / "cache").exists()
    assert seconds < 120, seconds  # python, torch and deepspeed start-up included


@pytest.mark.slow
def test_the_prediction_lands_in_the_metrics_beside_the_measured_peak(tmp_path):
    proc, _, metrics = _one_rank(tmp_path, "100000", dataset="rmat:10", strategy="ag")
    assert proc.returncode == 0, proc.stderr[-3000:]
    step = json.loads(metrics.read_text().splitlines()[0])
    assert step["kind"] == "step" and step["predicted_peak_mem_mb"] > 0 and step["peak_mem_mb"] > 0


def test_plan_prints_a_configs_memory_by_term_and_what_fits(capsys):
    from dsgraph.cli import main

    argv = ["plan", "--config", "ds_configs/cpu_general.json", "--world-size", "2", "--dataset", "rmat:24"]
    assert main([*argv, "--strategy", "ag", "--memory-limit-mb", "8000"]) == 0
    out = capsys.readouterr().out
    assert "memory per rank of ag on 2 ranks (bf16" in out and "process floor" in out and "K/V replicas" in out
    assert "over the limit of 8,000 MB per rank (memory_limit_mb); predicted to fit:" in out and "isolated" in out
    assert main([*argv, "--strategy", "auto"]) == 2
    assert "only full-graph runs of a named strategy" in capsys.readouterr().err


def test_a_stores_sizes_are_its_parts_with_the_self_loops_the_model_adds(tmp_path):
    from dsgraph.agp.run_memory import graph_sizes
    from dsgraph.graph.partition import halo_ids, partition_nodes, relabel
    from dsgraph.graph.store import write_store
    from tests.graphs import random_graph

    graph = random_graph()
    relabelled, perm, ranges = relabel(graph, partition_nodes(graph, 2, "random", seed=0), 2)
    write_store(relabelled, perm, ranges, str(tmp_path / "store"), "random")
    loops = relabelled.with_self_loops()
    shape, in_dim, classes, source = graph_sizes(_cfg(partitions=str(tmp_path / "store")), 2)
    split = shape.partitions[2]
    for r, (start, end) in enumerate(ranges):
        rowptr, col = loops.rows(start, end)
        stored = int(relabelled.rows(start, end)[0][-1])  # a self loop counted for every row: at most n too many
        assert (split.part_nodes[r], split.part_edges[r]) == (end - start, stored + end - start)
        assert int(rowptr[-1]) <= split.part_edges[r] <= int(rowptr[-1]) + end - start
        assert split.halo_sizes[r] == halo_ids(col.numpy(), start, end).size
    assert (in_dim, classes) == (graph.num_features, graph.num_classes) and "store" in source
    assert graph_sizes(_cfg(partitions=str(tmp_path / "store")), 3) is None  # the run refuses the mismatch itself
