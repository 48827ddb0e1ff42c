"""Faults survived without a person, through `dsgraph train` (docs/guides/reliability.md):

- a rank SIGKILLed mid-training under --max-restarts: torch elastic restarts every rank, they resume
  from the newest checkpoint, the job finishes every epoch, the restart is in the log and the
  metrics, and every epoch's loss equals an uninterrupted run's (1e-5, fp32);
- a rank that does not come back (its agent is killed too): the job continues on fewer ranks;
- a stopped rank (SIGSTOP): the others name it and its phase within heartbeat_timeout_s, and under
  --max-restarts the job restarts (its agent kills the stopped process) and finishes;
- two jobs started at the same moment on one machine (each picks a free port) both finish.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from dsgraph.comm.ports import free_port
from tests.train.helpers import ds_config, write_random_graph
from tests.train.test_faults import _rank_env, _train_cmd

pytestmark = pytest.mark.slow  # every test here starts processes

EPOCHS = 24


def _config(tmp: str, **section) -> str:
    path = os.path.join(tmp, "ds.json")
    settings = dict(
        dataset=write_random_graph(tmp), hidden=16, heads=2, layers=1, backend="reference", self_loops=False
    )
    settings.update({"eval_every": 1000, "epochs": EPOCHS, "checkpoint_every": 2, "seed": 3, **section})
    with open(path, "w") as f:
        json.dump({**ds_config(stage=1), "dsgraph": settings}, f)
    return path


def _dsgraph_train(tmp: str, name: str, config: str, *options: str) -> subprocess.Popen:
    out = os.path.join(tmp, name)
    cmd = [sys.executable, "-m", "dsgraph", "train", "--config", config, *options]
    cmd += ["--checkpoint-dir", os.path.join(out, "ckpt"), "--metrics-out", os.path.join(out, "metrics.jsonl")]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for(proc: subprocess.Popen, marker: str) -> list[str]:
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(marker):
            return seen
    raise AssertionError(f"no line starting with {marker!r}:\n" + "".join(seen)[-3000:])


def _children(pid: int) -> list[int]:
    kids = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            kids += [int(k) for k in f.read().split()]
    return kids


def _workers(launcher: int) -> dict[int, tuple[int, int]]:
    """rank -> (agent pid, worker pid) of a `dsgraph train --max-restarts` job."""
    found = {}
    for agent in _children(launcher):
        for worker in _children(agent):
            with open(f"/proc/{worker}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
            if b"RANK" in env:
                found[int(env[b"RANK"])] = (agent, worker)
    return found


def _losses(tmp: str, name: str) -> tuple[dict[int, float], list[dict]]:
    """Each epoch's loss (the last row written for it) and the restart rows of a run's metrics."""
    with open(os.path.join(tmp, name, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return {r["epoch"]: r["loss"] for r in rows if r["kind"] == "step"}, [r for r in rows if r["kind"] == "restart"]


def _finish(proc: subprocess.Popen, seen: list[str]) -> tuple[int, str]:
    out = "".join(seen) + proc.stdout.read()
    return proc.wait(timeout=900), out


def _kill_and_finish(
    tmp: str, name: str, config: str, lose_agent: bool, *options: str, sig=signal.SIGKILL
) -> tuple[int, str]:
    job = _dsgraph_train(tmp, name, config, "--max-restarts", "2", *options)
    try:
        seen = _wait_for(job, "epoch    5")
        agent, worker = _workers(job.pid)[1]
        if lose_agent:
            os.kill(agent, signal.SIGKILL)
        os.kill(worker, sig)
        return _finish(job, seen)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


def test_a_killed_rank_restarts_and_the_losses_match(tmp_path):
    tmp = str(tmp_path)
    config = _config(tmp)
    reference = _dsgraph_train(tmp, "reference", config, "--nprocs", "2")  # at the same moment: its own free port
    code, out = _kill_and_finish(tmp, "killed", config, False, "--nprocs", "2")
    ref_code, ref_out = _finish(reference, [])
    assert ref_code == 0, ref_out[-3000:]
    assert code == 0, out[-5000:]
    assert "restarted by torch elastic on 2 ranks" in out and "recorded failures" in out, out[-5000:]
    losses, restarts = _losses(tmp, "killed")
    expected, _ = _losses(tmp, "reference")
    assert len(restarts) >= 1 and restarts[0]["world_size"] == 2 and restarts[0]["resumed_epoch"] > 0, restarts
    assert sorted(losses) == list(range(EPOCHS)), sorted(losses)
    for epoch in range(EPOCHS):
        assert losses[epoch] == pytest.approx(expected[epoch], rel=1e-5, abs=1e-5), (epoch, losses, expected)


def test_a_rank_that_does_not_come_back_leaves_fewer_ranks(tmp_path):
    tmp = str(tmp_path)
    code, out = _kill_and_finish(tmp, "shrunk", _config(tmp), True, "--nprocs", "2", "--min-nprocs", "1")
    assert code == 0, out[-5000:]
    losses, restarts = _losses(tmp, "shrunk")
    assert restarts and restarts[-1]["world_size"] == 1, (restarts, out[-5000:])
    assert sorted(losses) == list(range(EPOCHS)), sorted(losses)


def test_a_stopped_rank_is_named_and_the_job_restarts(tmp_path):
    tmp = str(tmp_path)
    config = _config(tmp, heartbeat_timeout_s=6)
    code, out = _kill_and_finish(tmp, "stopped", config, False, "--nprocs", "2", sig=signal.SIGSTOP)
    assert code == 0, out[-5000:]
    assert "rank 1 sent no heartbeat for" in out and "restarted by torch elastic on 2 ranks" in out, out[-5000:]
    losses, restarts = _losses(tmp, "stopped")
    assert restarts and sorted(losses) == list(range(EPOCHS)), (restarts, sorted(losses))


@pytest.mark.parametrize("stopped", [1, 0])
def test_a_stopped_rank_is_named_within_the_heartbeat_bound(stopped, tmp_path):
    bound = 6
    config = _config(str(tmp_path), epochs=10**6, checkpoint_every=0, heartbeat_timeout_s=bound)
    port = free_port()
    out = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ranks = [subprocess.Popen(_train_cmd(config), env=_rank_env(r, 2, port), **out) for r in range(2)]
    survivor = ranks[1 - stopped]
    try:
        _wait_for(ranks[0], "epoch    2")
        time.sleep(2 * bound / 6)  # two heartbeats: the stopped rank's last one names its epoch, not start-up
        began = time.monotonic()
        os.kill(ranks[stopped].pid, signal.SIGSTOP)
        rest = survivor.stdout.read()
        code, elapsed = survivor.wait(timeout=120), time.monotonic() - began
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait()
    assert code == 3, rest[-3000:]
    assert elapsed < bound + bound / 6 + 5, (elapsed, rest[-3000:])
    if stopped == 1:
        assert "rank 1 sent no heartbeat for" in rest and "its last phase: epoch" in rest, rest[-3000:]
    else:  # rank 0 hosts the job's store under a plain launcher
        assert "the job's store at 127.0.0.1" in rest and "did not answer" in rest, rest[-3000:]


def test_two_jobs_started_at_the_same_moment_both_finish(tmp_path):
    tmp = str(tmp_path)
    config = _config(tmp, epochs=3, checkpoint_every=0)
    jobs = [_dsgraph_train(tmp, f"job{i}", config, "--nprocs", "2") for i in range(2)]
    for job in jobs:
        code, out = _finish(job, [])
        assert code == 0 and "done:" in out, out[-3000:]
