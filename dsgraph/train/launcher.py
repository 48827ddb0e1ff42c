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
        "--nprocs",
        type=_nprocs,
        default=2,
        help="ranks on this machine (GPUs when present, else CPU processes), or 'auto': AGP picks the rank count "
        "and the strategy of a full-graph run from this machine's profile, among those predicted to fit memory, "
        "prints the candidates and launches the pick",
    )
    p.add_argument("--config", default="ds_configs/cpu_quickstart.json", help='DeepSpeed JSON with a "dsgraph" section')
    _add_auto_arguments(p)
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
    decided = _plan_auto(p, args, rest)
    if isinstance(decided, int):
        return decided
    args.nprocs, rest = decided
    min_nprocs = args.nprocs if args.min_nprocs is None else args.min_nprocs
    if args.max_restarts < 0 or not 1 <= min_nprocs <= args.nprocs:
        p.error(f"need --max-restarts >= 0 and 1 <= --min-nprocs <= --nprocs, got {args.max_restarts}, {min_nprocs}")
    script = ["--deepspeed_config", args.config, *rest]
    if args.max_restarts == 0 and args.min_nprocs is None:
        run_deepspeed("dsgraph.train.main", args.nprocs, script, port)
    from dsgraph.train import elastic

    return elastic.run_agents("dsgraph.train.main", script, args.nprocs, min_nprocs, args.max_restarts, port)


def _add_auto_arguments(p: argparse.ArgumentParser) -> None:
    auto = p.add_argument_group("--nprocs auto")
    auto.add_argument("--max-nprocs", type=int, help="most ranks to consider (default: the GPUs, else the CPU cores)")
    auto.add_argument(
        "--profile",
        help="AGP profile to plan with (default: the config's agp.profile, else this machine's, measured once "
        "into the cache folder)",
    )
    auto.add_argument("--plan-out", help="where to write the launch plan (default runs/plans/CONFIG-UTC.json)")
    auto.add_argument(
        "--plan-only",
        action="store_true",
        help="print the candidates and the commands that launch the pick (deepspeed CLI too), launch nothing",
    )


def _plan_auto(p: argparse.ArgumentParser, args, rest: list[str]) -> tuple[int, list[str]] | int:
    """(ranks, the training script's arguments) to launch; with --nprocs auto, the plan's (or an exit
    code: a refusal, or --plan-only)."""
    if args.nprocs != "auto":
        if args.max_nprocs or args.profile or args.plan_out or args.plan_only:
            p.error("--max-nprocs, --profile, --plan-out and --plan-only go with --nprocs auto")
        return args.nprocs, rest
    if args.min_nprocs is not None:  # a shrunk restart would run other than the plan
        p.error("--nprocs auto launches the plan's rank count: give --nprocs N to restart on fewer (--min-nprocs)")
    from dsgraph.train.auto_launch import main_auto

    return main_auto(args.config, rest, args)


def _nprocs(value: str) -> int | str:
    if value == "auto":
        return value
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a rank count >= 1 or 'auto', got {value!r}")
    return int(value)


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
