"""Restarts by torch elastic: ``dsgraph train --max-restarts N`` on one machine.

The engine is torch elastic's agent (``python -m torch.distributed.run``, i.e. ``torchrun``), not a
supervisor of dsgraph's own. Each local rank gets its own agent (``--nnodes MIN:MAX
--nproc-per-node 1``): for the agent a rank is a node, so the two faults it knows map onto ours:

- a rank's process dies (SIGKILL, the OOM killer, exit 3 after a peer failure or a silent
  heartbeat): its agent restarts it, the other agents see the new rendezvous round and restart
  theirs, every rank resumes from the newest complete checkpoint (``main.py``); each agent gives up
  after ``max_restarts`` failures of its own rank;
- a rank does not come back (its agent is gone too, like a lost node): the others meet again
  without it once ``last_call_timeout`` has passed and continue on fewer ranks, down to MIN
  (resuming a checkpoint at another world size is exact, ``universal.py``).

This process hosts the rendezvous' TCP store (the agents are told ``is_host=false``), so no rank's
death takes the store with it, waits for the agents and says how the job ended, with every failure
the ranks recorded (``failures.py``). On several machines run one ``torchrun`` per machine the
same way (launch/slurm.sbatch, docs/guides/reliability.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from datetime import timedelta

from dsgraph.train import failures

LAST_CALL_S = 5  # how long a shrunken rendezvous waits for more ranks before it starts without them


def agent_command(module: str, args: list[str], nmin: int, nmax: int, max_restarts: int, port: int, run_id: str):
    """One torch elastic agent for one local rank of a job of ``nmin``..``nmax`` ranks."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nmin}:{nmax}",
        "--nproc-per-node=1",
        f"--max-restarts={max_restarts}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--rdzv-id={run_id}",
        f"--rdzv-conf=is_host=false,last_call_timeout={LAST_CALL_S}",
        "--monitor-interval=1",
        "--module",
        module,
        *args,
    ]


def run_agents(module: str, args: list[str], nprocs: int, min_nprocs: int, max_restarts: int, port: int) -> int:
    """Hosts the store, starts ``nprocs`` agents, waits for them; 0 when the job finished (a rank of
    its last round ended with 0), else the first non-zero exit code, after the failure summary."""
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", port, is_master=True, multi_tenant=True, timeout=timedelta(seconds=60))
    fd, log = tempfile.mkstemp(prefix="dsgraph-failures-", suffix=".jsonl")
    os.close(fd)
    # each round's rank 0 hosts a fresh store for the process group: torch's shared agent store keeps
    # the previous round's keys, and agents' restart counts (the per-attempt prefix) differ when one
    # agent restarts for a failure and another for the membership change
    env = {**os.environ, failures.ENV: log, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    args = with_run_name(args)
    cmd = agent_command(module, args, min_nprocs, nprocs, max_restarts, port, f"dsgraph-{port}")
    print(
        f"dsgraph: {nprocs} torch elastic agents ({min_nprocs}..{nprocs} ranks, up to {max_restarts} restarts "
        f"each, rendezvous 127.0.0.1:{port}):",
        " ".join(cmd),
        flush=True,
    )
    agents = [subprocess.Popen(cmd, env=env) for _ in range(nprocs)]
    try:
        codes = [agent.wait() for agent in agents]
    except KeyboardInterrupt:
        for agent in agents:
            agent.send_signal(signal.SIGINT)
        codes = [agent.wait() for agent in agents]
    records = failures.read(log)
    for path in (log, log + ".started"):
        if os.path.exists(path):
            os.unlink(path)
    del store
    return report(codes, records, max_restarts)


def with_run_name(args: list[str]) -> list[str]:
    """``args`` with a ``--run-name`` fixed now (unless they name one or a checkpoint folder), so that
    every attempt writes and resumes the same run's checkpoints."""
    if any(a.split("=")[0] in ("--run-name", "--checkpoint-dir") for a in args):
        return args
    from dsgraph.train import run_name

    config = args[args.index("--deepspeed_config") + 1]
    return [*args, "--run-name", run_name.default_run_name(run_name.config_stem(config))]


def report(codes: list[int], records: list[dict], max_restarts: int) -> int:
    """Prints how the job ended; returns its exit code."""
    if 0 in codes:
        if records:
            print(f"dsgraph: the job finished after {len(records)} recorded failures:\n{failures.summary(records)}")
        return 0
    print(
        f"dsgraph: error: the job gave up (agents' exit codes {codes}; each agent restarts its rank at most "
        f"{max_restarts} times). Failures:\n{failures.summary(records)}",
        file=sys.stderr,
        flush=True,
    )
    return next(c for c in codes if c != 0)
