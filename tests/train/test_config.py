"""The "dsgraph" config section and the training command's input errors."""

import json
import subprocess
import sys

import pytest

from dsgraph.train.config import DsgraphConfig, load_ds_config


def test_unknown_key_is_named_with_the_valid_keys(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"dsgraph": {"epochs": 3, "stratgy": "ag"}}))
    with pytest.raises(ValueError, match=r"unknown key\(s\) 'stratgy'.*valid keys: dataset, strategy, backend"):
        load_ds_config(str(path))


@pytest.mark.parametrize(
    "section, message",
    [
        ({"epochs": "ten"}, r"'epochs' must be int"),
        ({"epochs": 0}, r"'epochs' must be >= 1"),
        ({"strategy": "ring"}, r"'strategy' must be one of"),
        ({"hidden": 100, "heads": 8}, r"'hidden' \(100\) must be divisible by 'heads' \(8\)"),
        ({"dropout": 1.5}, r"'dropout' must be in \[0, 1\)"),
        ({"checkpoint_nested": True}, r"'checkpoint_nested' needs 'checkpoint_activations': true"),
        ({"regather_kv": True, "checkpoint_activations": True}, r"'parallel.regather_kv' does nothing with"),
        ({"checkpoint_failure": "retry"}, r"'checkpoint_failure' must be one of continue, stop; got 'retry'"),
        ({"nonfinite": "skip"}, r"'nonfinite' must be one of stop, rollback; got 'skip'"),
        ({"nonfinite_lr_factor": 1.0}, r"'nonfinite_lr_factor' must be in \(0, 1\), got 1.0"),
        ({"nonfinite": "rollback"}, r"'nonfinite': 'rollback' reloads a checkpoint; set 'checkpoint_every'"),
        ({"num_classes": 0}, r"'num_classes' must be >= 1 \(or null\), got 0"),
    ],
)
def test_bad_values(section, message):
    with pytest.raises(ValueError, match=message):
        DsgraphConfig.from_dict(section)


@pytest.mark.parametrize("backend", ["auto", "reference", "cpu", "cuda"])
def test_edge_conditioned_values_are_accepted_on_every_backend(backend):
    """The CUDA kernels keep only lse; edge values recompute the probabilities around them."""
    cfg = DsgraphConfig.from_dict({"backend": backend, "strategy": "ag", "model": {"edge_features": "bias_value"}})
    assert (cfg.backend, cfg.model.edge_features) == (backend, "bias_value")


def test_sequence_parallel_size_is_refused(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"sequence_parallel_size": 2}))
    with pytest.raises(ValueError, match="sequence_parallel_size"):
        load_ds_config(str(path))


def test_shipped_configs_are_valid():
    import glob

    files = glob.glob("ds_configs/*.json")
    assert len(files) >= 4
    for path in files:
        ds, cfg = load_ds_config(path)
        assert ds["train_micro_batch_size_per_gpu"] == 1 and isinstance(cfg, DsgraphConfig)


@pytest.mark.slow
def test_training_command_reports_bad_config_without_traceback(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"dsgraph": {"epoch": 3}}))
    proc = subprocess.run(
        [sys.executable, "launch/train.py", "--deepspeed_config", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "unknown key(s) 'epoch'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_training_command_reports_bad_dataset_without_traceback(tmp_path):
    path = tmp_path / "bad.npz"
    import numpy as np

    np.savez(
        path,
        src=np.array([0, 5]),
        dst=np.array([1, 0]),
        x=np.ones((3, 2)),
        y=np.zeros(3, int),
        train_mask=np.eye(3, dtype=bool)[0],
        val_mask=np.eye(3, dtype=bool)[1],
        test_mask=np.eye(3, dtype=bool)[2],
    )
    proc = subprocess.run(
        [
            sys.executable,
            "launch/train.py",
            "--deepspeed_config",
            "ds_configs/cpu_quickstart.json",
            "--dataset",
            str(path),
        ],
        capture_output=True,
        text=True,
        env={
            **__import__("os").environ,
            "WORLD_SIZE": "1",
            "RANK": "0",
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29731",
        },
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "edge index out of range in 'src'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "model, message",
    [
        (
            {"nrom": "pre"},
            r"unknown key\(s\) 'nrom' in \"model\"; valid keys: block, input_projection, norm, residual, head, "
            r"feature_norm, edge_features, global_attention, encodings",
        ),
        ({"norm": "middle"}, r"'model.norm' must be one of none, pre, post; got 'middle'"),
        ({"head": "mlp"}, r"'model.head' must be one of attention, linear"),
        ({"input_projection": "yes"}, r"'model.input_projection' must be bool, got 'yes'"),
        ({"residual": True}, r"'model.residual' must be str, got True"),
        ("gat", r"key 'model' must be a JSON object, got 'gat'"),
    ],
)
def test_bad_model_section_is_named(tmp_path, model, message):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"dsgraph": {"model": model}}))
    with pytest.raises(ValueError, match=message):
        load_ds_config(str(path))


def test_model_section_keeps_defaults_and_survives_command_line_overrides():
    from dsgraph.models import ModelOptions

    cfg = DsgraphConfig.from_dict({"model": {"norm": "post"}})
    assert cfg.model == ModelOptions(norm="post") and cfg.model.head == ModelOptions().head
    again = DsgraphConfig.from_dict({**cfg.to_dict(), "epochs": 3}, source="command line")  # what main.py does
    assert again.model == cfg.model and again.epochs == 3
    assert DsgraphConfig().model == ModelOptions()


def test_build_model_follows_the_model_section():
    from dsgraph.models.blocks import OutputAttention, TransformerBlock
    from dsgraph.train.trainer import build_model

    gat = build_model(
        DsgraphConfig(hidden=16, heads=2, layers=2, model={"block": "attention", "head": "attention"}), 10, 3
    )
    assert isinstance(gat.blocks[-1], OutputAttention) and gat.classifier is None
    tf = build_model(DsgraphConfig(hidden=16, heads=2, layers=2), 10, 3)  # the default: Transformer blocks, linear head
    assert all(isinstance(b, TransformerBlock) for b in tf.blocks) and tf.classifier is not None


def test_gpu_and_cpu_quickstart_train_the_same_model():
    """gpu_quickstart.json differs from cpu_quickstart.json in where it runs, not in what it trains."""
    cpu_ds, cpu = load_ds_config("ds_configs/cpu_quickstart.json")
    gpu_ds, gpu = load_ds_config("ds_configs/gpu_quickstart.json")
    keys = (
        "dataset",
        "hidden",
        "heads",
        "layers",
        "ffn_mult",
        "dropout",
        "input_dropout",
        "attention_dropout",
        "model",
        "epochs",
    )
    assert {k: getattr(cpu, k) for k in keys} == {k: getattr(gpu, k) for k in keys}
    for part in ("optimizer", "scheduler", "gradient_clipping"):
        assert cpu_ds.get(part) == gpu_ds.get(part), part


def test_graph_transformer_presets_are_what_the_model_page_says():
    """cpu_transformer.json: options.TRANSFORMER; cpu_general.json: that plus linear global attention;
    cpu_gps.json (GraphGPS-style): that plus RWSE, on the dataset `dsgraph encode cora --out cora_enc.npz`
    writes; all three with dropout 0.2, input dropout 0.2 and no attention dropout."""
    import dataclasses

    from dsgraph.models import TRANSFORMER

    presets = {name: load_ds_config(f"ds_configs/cpu_{name}.json")[1] for name in ("transformer", "general", "gps")}
    assert presets["transformer"].model == TRANSFORMER
    assert presets["general"].model == dataclasses.replace(TRANSFORMER, global_attention="linear")
    assert presets["gps"].model == dataclasses.replace(TRANSFORMER, global_attention="linear", encodings=("rwse",))
    assert presets["gps"].dataset == "cora_enc.npz"
    for cfg in presets.values():
        assert (cfg.dropout, cfg.input_dropout, cfg.attention_dropout) == (0.2, 0.2, 0.0)


def test_the_defaults_are_the_general_preset():
    """A config without model keys trains cpu_general.json's model and recipe (the one measured to
    learn on every kind of graph of docs/benchmarks/2026-12-03-graph-transformers.md)."""
    general = load_ds_config("ds_configs/cpu_general.json")[1]
    default = DsgraphConfig()
    keys = ("model", "hidden", "heads", "layers", "ffn_mult", "dropout", "input_dropout", "attention_dropout")
    assert {k: getattr(default, k) for k in keys} == {k: getattr(general, k) for k in keys}
