"""`dsgraph train --max-restarts` and `--master-port` without starting ranks: the agents' command,
the fixed run name, the failure log and the summary (the end-to-end faults: test_restarts.py)."""

from __future__ import annotations

import json
import os

import pytest

from dsgraph.train import elastic, failures, launcher


def test_agent_command_is_one_elastic_node_per_rank():
    cmd = elastic.agent_command("dsgraph.train.main", ["--epochs", "3"], 2, 4, 3, 12345, "job")
    for part in ("--nnodes=2:4", "--nproc-per-node=1", "--max-restarts=3", "--rdzv-backend=c10d"):
        assert part in cmd, cmd
    assert "--rdzv-endpoint=127.0.0.1:12345" in cmd and any("is_host=false" in c for c in cmd)
    assert cmd[-4:] == ["--module", "dsgraph.train.main", "--epochs", "3"]


def test_every_attempt_uses_the_same_run_name():
    args = ["--deepspeed_config", "ds_configs/zero1_fp32.json", "--epochs", "3"]
    named = elastic.with_run_name(args)
    assert named[:4] == args and named[4] == "--run-name" and named[5].startswith("zero1_fp32-")
    for given in (["--run-name", "mine"], ["--checkpoint-dir=/tmp/c"]):
        assert elastic.with_run_name(args + given) == args + given


def test_the_failure_log_restart_state_and_summary(tmp_path, monkeypatch):
    log = str(tmp_path / "failures.jsonl")
    env = {failures.ENV: log}
    assert failures.restart_state(str(tmp_path / "ckpt"), env) is None  # the first attempt leaves the marker
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    failures.record(1, "dsgraph: error (rank 1): rank 0 sent no heartbeat for 31 s\n", env)
    has_checkpoint, records = failures.restart_state(str(tmp_path / "ckpt"), env)
    assert not has_checkpoint and records[0]["attempt"] == 1 and records[0]["rank"] == 1
    os.makedirs(tmp_path / "ckpt" / "epoch000003")
    assert failures.restart_state(str(tmp_path / "ckpt"), env)[0]
    event = failures.restart_event(records, 2, 4, 8)
    assert event["kind"] == "restart" and event["resumed_epoch"] == 4 and event["world_size"] == 2
    assert "resumed from the checkpoint of epoch 3" in event["text"][1] and json.dumps(event)
    assert "attempt 1 rank 1: dsgraph: error (rank 1): rank 0 sent no heartbeat" in failures.summary(records)
    failures.record(0, "ignored", {})  # no log named: nothing written, no error
    assert len(failures.read(log)) == 1


def test_report_gives_up_with_the_summary(capsys):
    records = [{"time": 0.0, "attempt": 2, "rank": 0, "message": "rank 1 died"}]
    assert elastic.report([1, 1], records, 2) == 1
    err = capsys.readouterr().err
    assert "gave up" in err and "at most 2 times" in err and "attempt 2 rank 0: rank 1 died" in err
    assert elastic.report([0, -9], records, 2) == 0


@pytest.mark.parametrize("argv", [["--master-port", "0"], ["--master-port", "70000"], ["--min-nprocs", "3"]])
def test_bad_launch_options_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        launcher.main(["--nprocs", "2", *argv])
    assert stop.value.code == 2 and "--m" in capsys.readouterr().err
