#!/usr/bin/env python
"""The training check of tools/gpu/check.sh in ONE Python process on one rank: the runs of
tools/gpu/train_check.py (every one-rank strategy and mode on Cora in fp32 and bf16, checkpointed
ag in both, ag on rmat:20 in bf16), each a ``dsgraph.train.trainer.Trainer`` built through
dsgraph's API in turn, instead of one deepspeed launcher (three Python processes importing torch
and DeepSpeed) per run. The process joins a world of size 1 once (gloo on the CPU, NCCL on a GPU,
no launcher); each run gets the settings the CLI would give it (``launch/train.py``'s own option
parser on train_check's command line), its own config file and metrics file, and the same seeds
(torch, numpy, random reset before each run), so a run's losses do not depend on the runs before it.

    # on the CPU machine (bash tools/gpu/check.sh --prepare): the reference losses
    python -m tools.gpu.train_inprocess --device cpu --out .gpu_pack/reference_losses.json
    # on the GPU machine, in two groups (the bf16 run of each strategy first, then the rest)
    python -m tools.gpu.train_inprocess --device cuda --group strategies --reference REF --out train_strategies.json
    python -m tools.gpu.train_inprocess --device cuda --group rest --reference REF --out train_rest.json

Every run has a time limit (--run-timeout, and what is left of --timeout); a run that raises or
passes its limit is recorded with the reason and the next one runs. The results file is written
again after every run, so a process killed from outside (the step's timeout) leaves every finished
run, and the one it was in is named ("running when the process ended"). A run passes by
train_check's rules (``compare``): exit 0, as many steps as the reference, finite losses within
1e-3 (fp32) or 2e-2 (bf16) relative, and for auto an accepted AGP profile.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import signal
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from tools.gpu import train_check
from tools.gpu.train_check import ROOT, RunSpec

FORMAT = "dsgraph-gpu-train-inprocess"
FINGERPRINT_PATHS = (
    *train_check.FINGERPRINT_PATHS,
    "cuda",
    "tools/gpu/train_inprocess.py",
)  # a kernel change: a new reference
GROUPS = ("all", "strategies", "rest")


def ordered_specs(cora_epochs: int = 5, rmat_epochs: int = 3) -> list[RunSpec]:
    """train_check's runs, the bf16 run of every strategy first (the most informative), then the rest."""
    specs = train_check.run_specs(cora_epochs, rmat_epochs)
    first = [s for s in specs if in_group(s, "strategies")]
    return first + [s for s in specs if s not in first]


def in_group(spec: RunSpec, group: str) -> bool:
    strategies = spec.dtype == "bf16" and spec.dataset == "cora" and not spec.settings
    return group == "all" or strategies == (group == "strategies")


def fingerprint() -> str:
    return train_check.fingerprint(ROOT, FINGERPRINT_PATHS)


class RunTimeout(Exception):
    """A run passed its time limit (raised in the main thread by an interval timer)."""


@contextmanager
def time_limit(seconds: float):
    """Raises RunTimeout in the main thread after ``seconds`` (Python code only: a wait inside one C
    call ends when it returns; the step's outer timeout covers that)."""

    def expire(signum, frame):
        raise RunTimeout(f"passed its time limit of {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def join_world(device: str) -> object:
    """A process group of one rank (no launcher): the environment a launcher would set, then
    dsgraph's init_distributed. Returns the training device."""
    from dsgraph.comm.ports import free_port

    os.environ.update(
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        LOCAL_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        DS_ACCELERATOR="cuda" if device == "cuda" else "cpu",
    )
    from dsgraph.runtime import extensions, host_memory

    extensions.use_environment_build_dir()
    host_memory.defer_muon_compile()
    from dsgraph.train.trainer import init_distributed

    return init_distributed(300.0, mpi_discovery=False)


def run_settings(spec: RunSpec, folder: Path, device: str):
    """(ds_config, DsgraphConfig) of one run, as launch/train.py would build them from train_check's
    command line."""
    from dsgraph.train.config import load_ds_config
    from dsgraph.train.main import parse_args, with_options

    metrics = folder / f"{spec.name}.jsonl"
    cmd = train_check.command(spec, train_check.write_config(spec, folder), metrics, device, 0)
    args = parse_args(cmd[cmd.index(str(ROOT / "launch/train.py")) + 1 :])
    ds_config, cfg = load_ds_config(args.config)
    return ds_config, with_options(cfg, args)


def reset_seeds(seed: int = 0) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_one(spec: RunSpec, folder: Path, device, limit: float) -> dict:
    """One run, in this process; an exception or the time limit is its result, not the tool's end."""
    import torch

    from dsgraph.train.trainer import Trainer

    result = {**asdict(spec), "returncode": None, "seconds": 0.0, "losses": [], "agp_decision": None, "log_tail": ""}
    lines: list[str] = []
    began = time.monotonic()
    trainer = None
    try:
        with time_limit(limit):
            ds_config, cfg = run_settings(spec, folder, device.type)
            reset_seeds(cfg.seed)
            trainer = Trainer(cfg, ds_config, device, log=lines.append)
            trainer.fit(log=lines.append)
        result["returncode"] = 0
    except Exception as err:  # noqa: BLE001 - recorded; the next run goes on
        result["returncode"] = 124 if isinstance(err, RunTimeout) else 1
        lines.append("".join(traceback.format_exception(err))[-2500:])
    finally:
        del trainer
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    steps = train_check.read_steps(folder / f"{spec.name}.jsonl")
    result.update(
        seconds=round(time.monotonic() - began, 1), losses=[r["loss"] for r in steps], log_tail="\n".join(lines)[-3000:]
    )
    result["agp_decision"] = next((r.get("agp_decision") for r in steps if r.get("agp_decision")), None)
    return result


def not_run(spec: RunSpec, why: str) -> dict:
    return {**asdict(spec), "returncode": None, "seconds": 0.0, "losses": [], "agp_decision": None, "log_tail": why}


def check_runs(runs: list[dict], reference: dict | None) -> bool:
    """Adds each run's verdict against the reference (if any); True when all passed."""
    if reference is None:
        return bool(runs) and all(r["returncode"] == 0 for r in runs)
    same = reference.get("format") == FORMAT and reference.get("fingerprint") == fingerprint()
    refs = {r["name"]: r for r in reference.get("runs", [])}
    for r in runs:
        r["check"] = train_check.compare(r, refs.get(r["name"]), same)
    return bool(runs) and all(r["check"]["status"] == "PASSED" for r in runs)


def write_report(out: Path, device: str, runs: list[dict], reference: dict | None, pending: list[RunSpec]) -> bool:
    """The results file as it stands: finished runs checked, the rest named as not (yet) run."""
    rows = [dict(r) for r in runs] + [
        not_run(s, "running when the process ended" if i == 0 else "not started") for i, s in enumerate(pending)
    ]
    ok = check_runs(rows, reference) and not pending
    report = {
        "format": FORMAT,
        "device": device,
        "fingerprint": fingerprint(),
        "passed": ok,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(report, indent=1))
    os.replace(partial, out)
    return ok


def load_reference(path: str | None) -> dict | None:
    if not path:
        return None
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        print(
            f"gpu_train_inprocess: no usable reference {path} ({err}); make it with `bash tools/gpu/check.sh --prepare`"
        )
        return {"format": FORMAT, "fingerprint": "missing", "runs": []}


def run_all(specs: list[RunSpec], args: argparse.Namespace) -> bool:
    deadline = time.monotonic() + args.timeout
    out, reference = Path(args.out), load_reference(args.reference)
    write_report(out, args.device, [], reference, specs)
    device = join_world(args.device)
    folder = Path(tempfile.mkdtemp(prefix="dsgraph-train-inprocess-"))
    print(
        f"gpu_train_inprocess: {len(specs)} runs on {device}, one after another in this process; files in {folder}",
        flush=True,
    )
    runs: list[dict] = []
    for i, spec in enumerate(specs):
        left = deadline - time.monotonic()
        if left < 2:
            runs += [not_run(s, "not started: the check ran out of time") for s in specs[i:]]
            break
        runs.append(train_one(spec, folder, device, min(left, args.run_timeout)))
        r = runs[-1]
        print(
            f"gpu_train_inprocess: {spec.name}: exit {r['returncode']}, {len(r['losses'])} steps, {r['seconds']} s",
            flush=True,
        )
        write_report(out, args.device, runs, reference, specs[i + 1 :])
    ok = write_report(out, args.device, runs, reference, [])
    print(train_check.summary(json.loads(out.read_text())["runs"]))
    print(f"gpu_train_inprocess: {'PASSED' if ok else 'FAILED'} ({out})", flush=True)
    return ok


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], required=True, help="where the runs train")
    p.add_argument("--out", required=True, help="results JSON (from --device cpu: the reference for a GPU run)")
    p.add_argument("--reference", help="results JSON of the same runs on the CPU to compare the losses with")
    p.add_argument(
        "--group",
        choices=GROUPS,
        default="all",
        help="strategies: the bf16 Cora run of each strategy; rest: the others",
    )
    p.add_argument("--only", help="comma list of run names (default: the group's; see --list)")
    p.add_argument("--list", action="store_true", help="print the run names in order and exit")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds for all runs together (default 900)")
    p.add_argument("--run-timeout", type=float, default=300.0, help="seconds for one run (default 300)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--cora-epochs", type=int, default=5)
    p.add_argument("--rmat-epochs", type=int, default=3)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    specs = [s for s in ordered_specs(args.cora_epochs, args.rmat_epochs) if in_group(s, args.group)]
    specs = train_check.select(specs, args.only)
    if args.list:
        print("\n".join(s.name for s in specs))
        return 0
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return 0 if run_all(specs, args) else 1


if __name__ == "__main__":
    sys.exit(main())
