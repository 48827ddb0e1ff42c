"""``dsgraph train``: starts dsgraph's training module on P local ranks, with the deepspeed launcher,
or with torch elastic's agents when the job should restart by itself (``elastic.py``)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from dsgraph.comm.ports import free_port


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="dsgraph train",
        description="Launch training on this machine; other options go to the training script "
        "(see `python launch/train.py --help`). Without --max-restarts the deepspeed launcher starts the ranks; "
        "with it, torch elastic's agents do, and restart every rank from the newest checkpoint when one fails.",
    )
    p.add_argument(
        "--nprocs", type=int, default=2, help="ranks on this machine (GPUs when present, else CPU processes)"
    )
    p.add_argument("--config", default="ds_configs/cpu_quickstart.json", help='DeepSpeed JSON with a "dsgraph" section')
    add_port_argument(p)
    p.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="restart the job up to N times when a rank dies or hangs (torch elastic), each time from the newest "
        "checkpoint (set checkpoint_every); 0: a failure ends the job (default)",
    )
    p.add_argument(
        "--min-nprocs",
        type=int,
        help="with --max-restarts: continue on as few as this many ranks when a rank does not come back "
        "(default: --nprocs, i.e. never shrink)",
    )
    args, rest = p.parse_known_args(argv)
    port = checked_port(p, args.master_port)
    min_nprocs = args.nprocs if args.min_nprocs is None else args.min_nprocs
    if args.max_restarts < 0 or not 1 <= min_nprocs <= args.nprocs:
        p.error(f"need --max-restarts >= 0 and 1 <= --min-nprocs <= --nprocs, got {args.max_restarts}, {min_nprocs}")
    script = ["--deepspeed_config", args.config, *rest]
    if args.max_restarts == 0 and args.min_nprocs is None:
        run_deepspeed("dsgraph.train.main", args.nprocs, script, port)
    from dsgraph.train import elastic

    return elastic.run_agents("dsgraph.train.main", script, args.nprocs, min_nprocs, args.max_restarts, port)


def add_port_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--master-port",
        "--master_port",
        dest="master_port",
        type=int,
        help="TCP port of the ranks' rendezvous on this machine (default: a free port, so that two jobs can share "
        "a machine)",
    )


def checked_port(p: argparse.ArgumentParser, port: int | None) -> int:
    if port is None:
        return free_port()
    if not 1 <= port <= 65535:
        p.error(f"--master-port must be a TCP port (1..65535), got {port}")
    return port


def run_deepspeed(module: str, nprocs: int, args: list[str], port: int) -> None:
    """Replaces this process with ``deepspeed --num_accelerators=nprocs --master_port=port --module
    module *args`` (the deepspeed next to this Python when it is not on PATH)."""
    launcher = shutil.which("deepspeed") or os.path.join(os.path.dirname(sys.executable), "deepspeed")
    cmd = [launcher, f"--num_accelerators={nprocs}", f"--master_port={port}", "--module", module, *args]
    print("dsgraph: running", " ".join(cmd), flush=True)
    os.execv(cmd[0], cmd)
