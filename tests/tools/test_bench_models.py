"""tools/benchmarks/bench_models.py on the CPU: the dsgraph command, the PyG model's shape, OOM as a result."""

import json

import pytest
import torch

from dsgraph.graph import load_dataset
from dsgraph.models.graph_transformer import GraphTransformer
from dsgraph.models.options import TRANSFORMER
from dsgraph.train.config import load_ds_config
from tools.benchmarks import bench_models as bench


def _args(**kw):
    return bench.parse_args(
        [
            "--device",
            "cpu",
            "--dataset",
            "rmat:8",
            "--steps",
            "2",
            *sum((["--" + k, str(v)] for k, v in kw.items()), []),
        ]
    )


def test_line_intervals_leave_out_warm_up_and_evaluated_last_step():
    stamped = [
        (0.0, "control plane: torch"),
        (1.0, "epoch    0  loss 1.0"),
        (1.5, "epoch    1  loss 0.9"),
        (2.25, "epoch    2  loss 0.8"),
        (9.0, "epoch    3  loss 0.7  val_acc 0.5"),
    ]
    assert bench.line_intervals(stamped) == [0.5, 0.75]


def test_dsgraph_config_and_command(tmp_path):
    args = _args(dtype="bf16")
    ds, cfg = load_ds_config(str(bench.dsgraph_config(args, tmp_path)))
    assert (cfg.hidden, cfg.heads, cfg.layers, cfg.ffn_mult, cfg.dataset) == (128, 8, 2, 2, "rmat:8")
    assert cfg.model == TRANSFORMER  # PyG's TransformerConv model has this shape
    assert ds["bf16"]["enabled"] and ds["optimizer"]["params"]["torch_adam"]
    cmd = bench.dsgraph_command(bench.parse_args(["--steps", "4"]), tmp_path / "c.json", tmp_path / "m.jsonl")
    assert "--num_gpus" in cmd and cmd[cmd.index("--epochs") + 1] == "6" and cmd[cmd.index("--backend") + 1] == "cuda"


def test_pyg_model_has_the_graph_transformers_shape():
    """The same number of trained parameters (TransformerConv also builds lin_skip, unused without
    root_weight: it gets no gradient and is not counted)."""
    g = load_dataset("rmat:8")
    ours = GraphTransformer(
        g.num_features, g.num_classes, hidden=128, heads=8, layers=2, ffn_mult=2, options=TRANSFORMER
    )
    theirs = bench.pyg_model(g.num_features, g.num_classes, _args())
    theirs(g.x, bench.pyg_edges(g)).sum().backward()
    trained = sum(p.numel() for p in theirs.parameters() if p.grad is not None)
    assert trained == sum(p.numel() for p in ours.parameters())


def test_pyg_edges_add_missing_self_loops_only():
    g = load_dataset("rmat:8")
    edges = bench.pyg_edges(g)
    assert edges.shape[1] == g.num_edges + g.num_nodes  # R-MAT graphs have no self loops
    assert int((edges[0] == edges[1]).sum()) == g.num_nodes


def test_pyg_steps_on_a_small_graph():
    result = bench.run_pyg(load_dataset("rmat:8"), _args(dtype="bf16"))
    assert result["status"] == "ok" and len(result["wall_steps_s"]) == 2 and result["wall_step_s"] > 0
    assert all(torch.isfinite(torch.tensor(result["losses"])))


def test_pyg_out_of_memory_is_a_result(monkeypatch):
    def oom(*a):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")

    monkeypatch.setattr(bench, "_pyg_steps", oom)
    result = bench.run_pyg(load_dataset("rmat:8"), _args())
    assert result["status"] == "oom" and "16.00 GiB" in result["error"] and result["peak_mem_mb_before_oom"] > 0
    assert (
        bench.compare({"status": "ok", "wall_step_s": 1.0, "peak_mem_mb": 1.0}, result)["pyg_over_dsgraph_step_time"]
        is None
    )
    payload = {
        "dataset": "d",
        "nodes": 1,
        "edges": 1,
        "device": "cpu",
        "dtype": "bf16",
        "hidden": 128,
        "heads": 8,
        "layers": 2,
        "pyg": result,
    }
    assert "| pyg | oom: CUDA out of memory" in bench.report(payload)


@pytest.mark.slow
def test_both_models_on_the_cpu(tmp_path):
    out = tmp_path / "m.json"
    assert (
        bench.main(
            [
                "--device",
                "cpu",
                "--dataset",
                "rmat:8",
                "--steps",
                "2",
                "--threads",
                "1",
                "--port",
                "29681",
                "--json-out",
                str(out),
            ]
        )
        == 0
    )
    payload = json.loads(out.read_text())
    assert payload["dsgraph"]["status"] == "ok" and payload["pyg"]["status"] == "ok", payload["dsgraph"].get("log_tail")
    assert len(payload["dsgraph"]["wall_steps_s"]) == 2 and payload["dsgraph"]["peak_mem_mb"] > 0
    assert payload["comparison"]["pyg_over_dsgraph_step_time"] > 0
