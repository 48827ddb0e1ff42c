"""The sweep's summary: mean and sample std over runs, and its table."""

import pytest

from tools.reports.sweep import markdown, merge, summarise


def _row(test, val, last):
    return {
        "best": {"metric": "rocauc", "val": val, "test": test, "epoch": 3},
        "last": {"test_rocauc": last, "test_acc": 0.5},
    }


def test_summary_is_mean_and_sample_std():
    summary = summarise([_row(0.6, 0.7, 0.5), _row(0.8, 0.9, 0.7)])
    assert summary["test_rocauc_at_best_val"]["mean"] == pytest.approx(0.7)
    assert summary["test_rocauc_at_best_val"]["std"] == pytest.approx(0.1414213562, rel=1e-8)
    assert summary["test_acc_last"]["n"] == 2
    assert "| test_rocauc_at_best_val | 70.00 ± 14.14 | 2 |" in markdown(summary, "t")


def test_deepspeed_overrides_merge_objects_key_by_key():
    base = {"optimizer": {"type": "Adam", "params": {"lr": 0.005, "weight_decay": 5e-4}}, "bf16": {"enabled": True}}
    merged = merge(base, {"optimizer": {"params": {"lr": 0.01}}, "zero_optimization": {"stage": 0}})
    assert merged["optimizer"] == {"type": "Adam", "params": {"lr": 0.01, "weight_decay": 5e-4}}
    assert merged["zero_optimization"] == {"stage": 0} and merged["bf16"] == {"enabled": True}
    assert base["optimizer"]["params"]["lr"] == 0.005
