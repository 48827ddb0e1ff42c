"""Faults end to end, through the training command:

- a damaged partition store (truncated array, checksum mismatch, part count != world size, a newer
  META.json format) stops training before it starts: exit code 2, a message naming the file, no
  traceback;
- a rank killed (SIGKILL) or frozen (SIGSTOP) mid-training makes the other rank exit within the
  configured timeout, with a message that says how to restart.
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
from dsgraph.graph.partition_cli import main as partition_main
from tests.train.helpers import ds_config, write_random_graph

pytestmark = pytest.mark.slow  # every test here starts processes


def _train_cmd(config: str, *extra: str) -> list[str]:
    return [sys.executable, "launch/train.py", "--deepspeed_config", config, *extra]


def _rank_env(rank: int, world: int, port: int) -> dict:
    return {
        **os.environ,
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
    }


def _write_config(tmp, **section) -> str:
    path = os.path.join(tmp, "ds.json")
    settings = dict(hidden=16, heads=2, layers=1, backend="reference", self_loops=False, eval_every=1000, **section)
    with open(path, "w") as f:
        json.dump({**ds_config(stage=1), "dsgraph": settings}, f)
    return path


def lose_a_rank(config: str, env_of, marker: str, fault: str, timeout_s: float) -> tuple[int, str, float]:
    """Starts 2 ranks, waits until rank 0 prints a line starting with ``marker``, then kills (or
    freezes, ``fault="stop"``) rank 1. Returns rank 0's exit code, the rest of its output, and the
    seconds it took to exit after the fault."""
    port = free_port()
    ranks = [
        subprocess.Popen(
            _train_cmd(config), env=env_of(r, 2, port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for r in range(2)
    ]
    try:
        seen = []
        for line in ranks[0].stdout:
            seen.append(line)
            if line.startswith(marker):
                break
        assert seen and seen[-1].startswith(marker), "".join(seen)[-3000:]
        began = time.monotonic()
        os.kill(ranks[1].pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        rest = ranks[0].stdout.read()
        code = ranks[0].wait(timeout=timeout_s + 60)
        return code, rest, time.monotonic() - began
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _damage(store: str, case: str) -> str:
    """Damages a one-part store; returns the file the error must name."""
    if case == "truncated":
        path = os.path.join(store, "part_0000", "col.npy")
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 8)
    elif case == "checksum":
        path = os.path.join(store, "part_0000", "x.npy")
        with open(path, "r+b") as f:
            f.seek(-4, os.SEEK_END)
            f.write(b"\x00\x00\x80\x7f")  # a different float, same size
    else:
        path = os.path.join(store, "META.json")
        with open(path) as f:
            meta = json.load(f)
        meta["format_version"] = 99
        with open(path, "w") as f:
            json.dump(meta, f)
    return path


def test_damaged_store_stops_before_training(tmp_path):
    graph = write_random_graph(str(tmp_path))
    cases = ("truncated", "checksum", "newer_format", "part_count")
    procs = {}
    for case in cases:
        parts = 2 if case == "part_count" else 1
        store = str(tmp_path / case)
        assert (
            partition_main(
                ["--dataset", graph, "--parts", str(parts), "--method", "contiguous", "--out", store, "--quiet"]
            )
            == 0
        )
        named = os.path.join(store, "META.json") if case == "part_count" else _damage(store, case)
        config = _write_config(str(tmp_path), epochs=1)
        cmd = _train_cmd(config, "--strategy", "halo", "--partitions", store)
        procs[case] = (
            named,
            subprocess.Popen(
                cmd, env=_rank_env(0, 1, free_port()), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            ),
        )
    problems = {
        "truncated": "file is truncated",
        "checksum": "sha256 checksum mismatch",
        "newer_format": "format_version 99 is newer",
        "part_count": "has 2 parts but the job has 1 ranks",
    }
    for case, (named, proc) in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 2, (case, err[-3000:])
        assert named in err and problems[case] in err, (case, err[-3000:])
        assert "Traceback" not in err and "epoch" not in out, (case, err[-3000:])


@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_survivor_exits_within_timeout_when_a_rank_dies_or_hangs(fault, tmp_path):
    timeout_s = 10
    graph = write_random_graph(str(tmp_path))
    config = _write_config(str(tmp_path), dataset=graph, strategy="halo", epochs=10**6, timeout_s=timeout_s)
    code, rest, elapsed = lose_a_rank(config, _rank_env, "epoch    2", fault, timeout_s)
    assert code == 3, rest[-3000:]
    assert elapsed < timeout_s + 15, elapsed
    assert "another rank died or did not answer within 10 s" in rest and "--resume" in rest, rest[-3000:]
    if fault == "stop":  # nothing closed a connection: only the timeout can have ended the wait, the watchdog's
        # or the default group's (the epoch end's preemption all-reduce runs on it, with timeout_s)
        assert elapsed >= timeout_s - 1 and ("no progress" in rest or "Timed out" in rest), (elapsed, rest[-3000:])
