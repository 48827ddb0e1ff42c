"""``dsgraph train --nprocs auto``: plan the run with this machine's AGP profile, print the candidates
and the pick, write the launch plan, and say how many ranks to launch (``dsgraph/agp/launch.py``
decides; this file finds the profile, the graph's sizes and the machine's rank count)."""

from __future__ import annotations

import os
import sys
import time

from dsgraph.agp.launch import LaunchPlan, describe, plan_launch, run_dtype


def machine_ranks() -> int:
    """Ranks this machine can run side by side: its GPUs, else its CPU cores."""
    import torch

    if _has_gpus():
        return torch.cuda.device_count()
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine_profile(cfg, dtype: str, max_ranks: int, given: str | None, log=print) -> str:
    """The AGP profile to plan with: ``given`` (--profile), the config's ``agp.profile``, else this
    machine's profile in the cache, measured now (about two minutes on a 2-core CPU) when it is missing or
    covers fewer ranks."""
    path = given or cfg.agp.profile
    if path:
        return path
    from dsgraph.agp.profile import load_profile
    from dsgraph.graph.datasets import cache_dir

    device = "cuda" if _has_gpus() else "cpu"
    path = os.path.join(cache_dir(), "agp", f"profile-{device}-{dtype}.json")
    if os.path.isfile(path) and load_profile(path).max_ranks >= max_ranks:
        return path
    from dsgraph.agp import profile_cli

    log(f"dsgraph: measuring this machine's AGP profile ({dtype}, 1..{max_ranks} ranks) into {path}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    argv = ["--out", path, "--max-ranks", str(max_ranks), "--dtype", dtype]
    if device == "cuda":
        argv += ["--backend", "cuda"]
    if profile_cli.main(argv) != 0:
        raise ValueError("measuring the AGP profile failed (see above); give one with --profile")
    return path


def _has_gpus() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def _whole_graph(cfg):
    """The graph (with the run's self loops) when its sizes are not known from its name or store."""
    from dsgraph.agp.run_memory import graph_sizes

    if cfg.partitions or graph_sizes(cfg, 1) is not None:
        return None
    from dsgraph.graph import load_dataset

    graph = load_dataset(cfg.dataset)
    return graph.with_self_loops() if cfg.adds_self_loops else graph


def _gpu_limit(p: int) -> float:
    import torch

    return torch.cuda.mem_get_info(0)[1] / 2**20


def plan(config: str, script_args: list[str], max_ranks: int | None, profile: str | None, log=print) -> LaunchPlan:
    """The launch plan of the run that ``launch/train.py --deepspeed_config config *script_args`` describes."""
    from dsgraph.agp.profile import load_profile
    from dsgraph.train.config import load_ds_config
    from dsgraph.train.main import parse_args, with_options

    args = parse_args(["--deepspeed_config", config, *script_args])
    if args.strategy is not None or args.launch_plan is not None:
        raise ValueError("--nprocs auto picks the strategy: leave out --strategy and --launch-plan")
    ds_config, cfg = load_ds_config(config)
    cfg = with_options(cfg, args)
    ranks = max_ranks or machine_ranks()
    dtype = run_dtype(ds_config)
    path = machine_profile(cfg, dtype, ranks, profile, log)
    gpus = _has_gpus()
    limit_of, device = (_gpu_limit, "cuda") if gpus else (None, "cpu")
    return plan_launch(cfg, ds_config, load_profile(path), ranks, _whole_graph(cfg), limit_of, device)


def plan_file(config: str, given: str | None) -> str:
    """Where the plan goes: ``given``, else runs/plans/CONFIG_STEM-UTC.json."""
    if given:
        return given
    stem = os.path.splitext(os.path.basename(config))[0]
    return os.path.join("runs", "plans", f"{stem}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}.json")


def show(p: LaunchPlan, path: str, log=print) -> None:
    log(f"dsgraph: --nprocs auto: candidates for {p.dataset} (profile {p.profile}):")
    for line in p.table():
        log("  " + line)
    for line in p.reasons:
        log("  " + line)
    log(f"dsgraph: pick {describe(p)}; plan written to {path}")


def launch_lines(p: LaunchPlan, path: str, config: str, script_args: list[str]) -> list[str]:
    """The commands that launch the pick: dsgraph's launcher, and the deepspeed CLI."""
    rest = " ".join([*script_args, "--launch-plan", path])
    return [
        f"dsgraph train --nprocs {p.ranks} --config {config} {rest}",
        f"deepspeed --num_accelerators {p.ranks} launch/train.py --deepspeed_config {config} {rest}",
    ]


def main_auto(config: str, script_args: list[str], args) -> tuple[int, list[str]] | int:
    """Plans the run (``args``: the launcher's --max-nprocs, --profile, --plan-out, --plan-only). Returns
    the exit code when nothing is to be launched (a refusal, or --plan-only), else (ranks, the
    training script's arguments with the plan)."""
    try:
        chosen = plan(config, script_args, args.max_nprocs, args.profile)
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph train: error: {err}", file=sys.stderr)
        return 2
    path = plan_file(config, args.plan_out)
    chosen.save(path)
    show(chosen, path)
    if args.plan_only:
        print("launch it with either of:")
        for line in launch_lines(chosen, path, config, script_args):
            print("  " + line)
        return 0
    return chosen.ranks, [*script_args, "--launch-plan", path]
