"""Measures how fast dsgraph finds a stopped rank and restarts after a killed one
(docs/guides/reliability.md), on the small graph and the exact set-up of tests/train/test_restarts.py:

- detect: 2 ranks, default heartbeat_timeout_s (30 s); rank 1 is SIGSTOPped 10 s after epoch 2 (its
  heartbeats have gone round); the time until rank 0 has exited naming it and its phase;
- restart: `dsgraph train --nprocs 2 --max-restarts 2`; rank 1's worker is SIGKILLed after epoch 5;
  the time until rank 0 prints "dsgraph: restarted", and until the first epoch line after that.

    .venv/bin/python -m tools.reports.fault_times detect restart --repeats 3
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import tempfile
import time

from dsgraph.comm.ports import free_port
from tests.train.test_faults import _rank_env, _train_cmd
from tests.train.test_restarts import _config, _dsgraph_train, _wait_for, _workers

BEATS_S = 10.0  # two heartbeat intervals at the default bound (30 s / 6)


def detect(tmp: str) -> dict:
    config = _config(tmp, epochs=10**6, checkpoint_every=0)
    port = free_port()
    out = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ranks = [subprocess.Popen(_train_cmd(config), env=_rank_env(r, 2, port), **out) for r in range(2)]
    try:
        _wait_for(ranks[0], "epoch    2")
        time.sleep(BEATS_S)  # the heartbeats (started after set-up) have gone round with the training phase
        began = time.monotonic()
        os.kill(ranks[1].pid, signal.SIGSTOP)
        rest = ranks[0].stdout.read()
        ranks[0].wait()
        named = [line for line in rest.splitlines() if "heartbeat" in line]
        return {"detected_s": time.monotonic() - began, "message": named[0] if named else None}
    finally:
        for p in ranks:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.wait()


def restart(tmp: str) -> dict:
    job = _dsgraph_train(tmp, "m", _config(tmp, epochs=14), "--nprocs", "2", "--max-restarts", "2")
    try:
        _wait_for(job, "epoch    5")
        _, worker = _workers(job.pid)[1]
        began = time.monotonic()
        os.kill(worker, signal.SIGKILL)
        _wait_for(job, "dsgraph: restarted")
        restarted = time.monotonic() - began
        _wait_for(job, "epoch ")
        first_epoch = time.monotonic() - began
        job.stdout.read()
        return {"restarted_s": restarted, "first_epoch_s": first_epoch, "exit_code": job.wait()}
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", nargs="+", choices=["detect", "restart"])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    for what in args.what:
        measure = detect if what == "detect" else restart
        runs = [measure(tempfile.mkdtemp(prefix=f"dsgraph-{what}-")) for _ in range(args.repeats)]
        for i, run in enumerate(runs):
            print(what, i, run, flush=True)
        for key in [k for k, v in runs[0].items() if isinstance(v, float)]:
            values = [r[key] for r in runs]
            print(
                f"{what} {key}: min {min(values):.1f} s, median {statistics.median(values):.1f} s, "
                f"max {max(values):.1f} s"
            )


if __name__ == "__main__":
    main()
