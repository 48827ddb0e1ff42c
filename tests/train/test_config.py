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
    ],
)
def test_bad_values(section, message):
    with pytest.raises(ValueError, match=message):
        DsgraphConfig.from_dict(section)


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


def test_training_command_reports_bad_config_without_traceback(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"dsgraph": {"epoch": 3}}))
    proc = subprocess.run([sys.executable, "launch/train.py", "--deepspeed_config", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "unknown key(s) 'epoch'" in proc.stderr and "Traceback" not in proc.stderr


def test_training_command_reports_bad_dataset_without_traceback(tmp_path):
    path = tmp_path / "bad.npz"
    import numpy as np

    np.savez(path, src=np.array([0, 5]), dst=np.array([1, 0]), x=np.ones((3, 2)), y=np.zeros(3, int),
             train_mask=np.ones(3, bool), val_mask=np.ones(3, bool), test_mask=np.ones(3, bool))  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "launch/train.py", "--deepspeed_config", "ds_configs/cpu_quickstart.json", "--dataset", str(path)],
        capture_output=True, text=True, env={**__import__("os").environ, "WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0",
                                             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29731"},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "edge index out of range in 'src'" in proc.stderr and "Traceback" not in proc.stderr
