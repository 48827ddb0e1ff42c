"""Training entry point, run under a launcher on every rank:

    deepspeed --num_accelerators 2 launch/train.py --deepspeed_config ds_configs/cpu_quickstart.json

Settings come from the config's "dsgraph" section; command-line options override them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading

from dsgraph.graph.partition import METHODS
from dsgraph.modes.registry import DEFAULT_MODE, mode_names
from dsgraph.ops.dispatch import backend_names
from dsgraph.parallel import get_strategy, strategy_names
from dsgraph.runtime.watchdog import Watchdog
from dsgraph.tasks import TASKS
from dsgraph.tasks.base import metrics_help
from dsgraph.train.config import SECTIONS, DsgraphConfig, load_ds_config, with_overrides

DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "ds_configs", "cpu_quickstart.json")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="launch/train.py",
        description="Full-graph Graph Transformer training on DeepSpeed. Run it under `deepspeed` (or mpirun); "
        'settings live in the config\'s "dsgraph" section and these options override them.',
    )
    p.add_argument(
        "--deepspeed_config", "--config", dest="config", required=True, help='DeepSpeed JSON with a "dsgraph" section'
    )
    p.add_argument("--dataset", help="cora | rmat:SCALE[:EDGE_FACTOR] | PATH.npz")
    _add_parallel_arguments(p)
    _add_execution_arguments(p)
    _add_training_arguments(p)
    _add_output_arguments(p)
    p.add_argument("--local_rank", type=int, default=-1, help=argparse.SUPPRESS)  # passed by the deepspeed launcher
    return p.parse_args(argv)


def _add_parallel_arguments(p: argparse.ArgumentParser) -> None:
    """How the graph is trained over the ranks: the strategy, the mode and AGP's profile."""
    strategies = "; ".join(f"{name}: {get_strategy(name).summary}" for name in strategy_names())
    p.add_argument(
        "--strategy",
        choices=[*strategy_names(), *(m for m in mode_names() if m != DEFAULT_MODE)],
        help=f"graph-parallel attention strategy ({strategies}). 'sampled' and 'isolated' are older "
        "spellings of --mode; a strategy without --mode trains the full graph",
    )
    p.add_argument(
        "--mode",
        choices=mode_names(),
        help="training mode: full graph (default), sampled mini-batches, or isolated (Grappa) training",
    )
    p.add_argument(
        "--agp-profile",
        dest="agp_profile",
        metavar="JSON",
        help="AGP profile (`dsgraph profile`): --strategy auto picks from it, and a named strategy's predicted step "
        "time goes into the metrics",
    )
    p.add_argument(
        "--launch-plan",
        dest="launch_plan",
        metavar="JSON",
        help="launch plan of `dsgraph train --nprocs auto [--plan-only]`: the run takes its strategy and refuses "
        "another rank count, naming the command that launches the pick",
    )


def _add_execution_arguments(p: argparse.ArgumentParser) -> None:
    """Traces, the partition each rank reads, the watchdog and the attention kernel."""
    p.add_argument(
        "--trace-steps",
        dest="trace_steps",
        metavar="A:B",
        help="record torch.profiler traces of steps A..B-1 on every rank (TensorBoard's profiler tab, or Perfetto)",
    )
    p.add_argument(
        "--trace-dir",
        dest="trace_dir",
        help="folder for the traces (default: the run's TensorBoard folder, else runs/RUN_NAME/traces)",
    )
    p.add_argument(
        "--partitions",
        metavar="DIR",
        help="partition store with one part per rank (`dsgraph partition`); each rank memory-maps only its own part. "
        "Mode isolated: any part count, the parts are its chunks, trained one pair at a time. Mode sampled: "
        "neighbours and features are fetched from the parts that own them, evaluation runs in sampled chunks",
    )
    p.add_argument(
        "--partition-method",
        dest="partition_method",
        choices=list(METHODS),
        help="in-memory partitioning for a strategy that needs a partition, without --partitions (default metis)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        dest="timeout_s",
        metavar="SECONDS",
        help="stop every rank if another rank dies or is silent this long (default 300)",
    )
    p.add_argument(
        "--memory-limit-mb",
        type=float,
        dest="memory_limit_mb",
        metavar="MB",
        help="refuse a full-graph run predicted to peak above this many MB per rank, before loading its graph "
        "(default: available memory / ranks on the machine; $DSGRAPH_MEMORY_LIMIT_MB overrides)",
    )
    p.add_argument(
        "--heartbeat-timeout",
        type=float,
        dest="heartbeat_timeout_s",
        metavar="SECONDS",
        help="stop every rank, naming it, when a rank's heartbeat stops this long, e.g. a stopped process (default 30)",
    )
    p.add_argument(
        "--backend",
        choices=["auto", *backend_names()],
        help="sparse attention kernel (default auto: the fastest that runs the inputs)",
    )


def _add_training_arguments(p: argparse.ArgumentParser) -> None:
    """The split, the metric, the epochs, the seed and how often to evaluate and where to log."""
    p.add_argument("--split", type=int, help="which of the dataset's fixed splits (masks [S, N]) to train on, 0-based")
    p.add_argument(
        "--metric",
        help=f"evaluation metric and model selection, by task: {metrics_help(TASKS)} (default: accuracy for "
        "multi-class, rocauc for binary, multi-label and link tasks, mse for regression)",
    )
    p.add_argument("--epochs", type=int, help="number of full-graph epochs (one optimizer step each)")
    p.add_argument("--seed", type=int, help="seed for parameters, dropout masks and synthetic data")
    p.add_argument("--eval-every", type=int, dest="eval_every", help="evaluate every this many epochs")
    p.add_argument("--metrics-out", dest="metrics_out", help="JSON-lines metrics file (rank 0 writes it)")


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    """Checkpoints, resuming and the run's name (which names its output folder)."""
    p.add_argument("--checkpoint-dir", dest="checkpoint_dir", help="folder for DeepSpeed checkpoints")
    p.add_argument(
        "--checkpoint-every", type=int, dest="checkpoint_every", help="save every this many epochs (0: never)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="resume from the newest complete checkpoint in --checkpoint-dir "
        "(at any world size; docs/checkpoints.md; with the default paths: pass the --run-name of the run to continue)",
    )
    p.add_argument(
        "--run-name",
        dest="run_name",
        help="name of this run: outputs go to runs/NAME/ (metrics.jsonl, "
        "checkpoints/) and TensorBoard's job is NAME (default: CONFIG_STEM-UTC_TIMESTAMP)",
    )


def main(argv: list[str] | None = None) -> int:
    """Runs one rank of the job; the exit code is 0, 2 (a problem the message names, with its fix),
    3 (another rank died or went silent) or 4 (preempted by a signal: checkpoint written, resume
    with --resume). A watchdog covers every phase from here on, so no phase of start-up or training
    can wait silently forever."""
    from dsgraph.runtime import host_memory

    args = parse_args(argv)
    try:
        ds_config, cfg = load_ds_config(args.config)
        cfg = with_options(cfg, args)
        if args.resume and cfg.run_name is None and (cfg.checkpoint_dir is None or "{run_name}" in cfg.checkpoint_dir):
            raise ValueError(
                "--resume continues a named run: pass --run-name NAME (its checkpoints are in "
                "runs/NAME/checkpoints), or --checkpoint-dir DIR"
            )
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph: error: {err}", file=sys.stderr)
        return 2
    host_memory.apply_threshold_mb(cfg.host_mmap_threshold_mb)  # before the graph is loaded (host_memory.py)

    from dsgraph.runtime import extensions

    main_thread = threading.main_thread().ident
    with Watchdog(launcher_rank(), cfg.timeout_s, diagnose=lambda: extensions.stuck_build(main_thread)) as watchdog:
        watchdog.beat("start-up: importing DeepSpeed")  # armed before DeepSpeed is imported
        extensions.use_environment_build_dir()
        # TorchInductor is not imported for DeepSpeed's unused Muon (see host_memory.py)
        host_memory.defer_muon_compile()
        return _run(args, cfg, ds_config, watchdog)


def with_options(cfg: DsgraphConfig, args: argparse.Namespace) -> DsgraphConfig:
    """``cfg`` with the command-line options given in ``args`` in place of its values (an option's
    ``dest`` is its key: a top-level key, or the older top-level spelling of a section's key)."""
    flat = [old for cls in SECTIONS.values() for old in cls.FLAT_KEYS]
    keys = [f.name for f in dataclasses.fields(DsgraphConfig)] + flat
    overrides = {key: getattr(args, key) for key in keys if getattr(args, key, None) is not None}
    if args.strategy in strategy_names() and args.mode is None:
        overrides["mode"] = DEFAULT_MODE  # --strategy X picks full-graph training with X, whatever the file's mode
    return with_overrides(cfg, overrides)


def launcher_rank() -> int | None:
    """This process's rank as the launcher announced it (deepspeed/torchrun, MPICH, Open MPI, SLURM),
    for messages printed before the process group exists; None when no launcher set one."""
    for var in ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return None


def _run(args: argparse.Namespace, cfg: DsgraphConfig, ds_config: dict, watchdog: Watchdog) -> int:
    """Joins the job and trains; every exit path removes this rank's shared memory."""
    import deepspeed.comm as dist

    from dsgraph.runtime import shm
    from dsgraph.runtime.watchdog import is_peer_failure
    from dsgraph.train.preemption import EXIT_PREEMPTED, Preempted
    from dsgraph.train.trainer import init_distributed

    try:
        cfg = _follow_plan(cfg)
        cfg = _fit_memory(cfg, ds_config)  # before the graph is built or loaded
        build_dataset(cfg, watchdog.beat)
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph: error: {err}", file=sys.stderr)
        return 2
    watchdog.beat("start-up: joining the process group (init_distributed)")
    try:
        device = init_distributed(cfg.timeout_s)
    except Exception as err:
        if is_peer_failure(err):
            _exit_peer_failure(watchdog.rank, cfg.timeout_s, err)
        raise
    rank = dist.get_rank()
    watchdog.rank, watchdog.on_exit = rank, lambda: _on_fault_exit(rank, watchdog.last_message)
    cfg, ds_config, prefix = _name_run(args, cfg, ds_config, rank)
    try:
        _remove_dead_buffers(rank, watchdog)
        if device.type == "cpu":
            ds_config = _cpu_optimizer(ds_config, rank)
        _train(args, cfg, ds_config, device, watchdog, prefix)
        watchdog.beat("destroying the process group")
        dist.destroy_process_group()
        return 0
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph: error (rank {rank}): {err}", file=sys.stderr)
        dist.destroy_process_group()
        return 2
    except Preempted as stop:  # every rank saved the checkpoint together and met at its barrier
        if rank == 0:
            print(f"dsgraph: {stop}", flush=True)
        dist.destroy_process_group()
        return EXIT_PREEMPTED
    except Exception as err:
        if not is_peer_failure(err):
            dist.destroy_process_group()
            raise
        shm.remove_own_buffer(rank)  # os._exit below skips the finally block
        _exit_peer_failure(rank, cfg.timeout_s, err)
    finally:
        shm.remove_own_buffer(rank)


def build_dataset(cfg: DsgraphConfig, heartbeat) -> None:
    """A synthetic dataset missing from the cache is generated before the process group exists: one
    process per machine builds it, the others wait on its file lock (``datasets.cached_dataset``), so
    no rank waits for the build inside a collective and its timeout. The builder shows progress bars."""
    if cfg.partitions is None and cfg.dataset.startswith("rmat:"):
        from dsgraph.graph.datasets import cached_dataset

        cached_dataset(cfg.dataset, cfg.seed, heartbeat=heartbeat, progress=True)


def _name_run(args, cfg: DsgraphConfig, ds_config: dict, rank: int) -> tuple[DsgraphConfig, dict, str]:
    """The run's name (rank 0's time stamp, shared) in its output paths; rank 0 says where they go.
    Also returns the heartbeats' key prefix for this attempt (rank 0's, shared)."""
    import deepspeed.comm as dist

    from dsgraph.comm.heartbeat import new_prefix
    from dsgraph.train import run_name

    shared = [cfg.run_name or run_name.default_run_name(run_name.config_stem(args.config)), new_prefix()]
    if dist.get_world_size() > 1:
        dist.broadcast_object_list(shared, src=0)
    name, prefix = shared
    ds_config = run_name.tensorboard_for_run(ds_config, name)
    cfg = run_name.with_run_name(cfg, name, True, run_name.tensorboard_run_dir(ds_config))
    if rank == 0:
        print(f"dsgraph: {run_name.describe(cfg, ds_config)}", flush=True)
    return cfg, ds_config, prefix


def _heartbeats(cfg: DsgraphConfig, rank: int, prefix: str, watchdog: Watchdog):
    """This rank's heartbeats (``dsgraph.comm.heartbeat``): a silent peer ends the rank (exit 3)."""
    import deepspeed.comm as dist

    from dsgraph.comm.heartbeat import Heartbeats
    from dsgraph.runtime.watchdog import EXIT_PEER_FAILURE

    def silent(message: str) -> None:
        print(message, file=sys.stderr, flush=True)
        _on_fault_exit(rank, message)
        os._exit(EXIT_PEER_FAILURE)

    world = dist.get_world_size()
    return Heartbeats(rank, world, cfg.heartbeat_timeout_s, prefix, lambda: watchdog.phase, silent)


def _on_fault_exit(rank: int, message: str) -> None:
    """Before a rank ends on a fault: records it for the restart summary, removes its shared memory."""
    from dsgraph.runtime import shm
    from dsgraph.train import failures

    failures.record(rank, message)
    shm.remove_own_buffer(rank)


def _train(args: argparse.Namespace, cfg: DsgraphConfig, ds_config: dict, device, watchdog: Watchdog, prefix: str):
    """Builds the trainer for the configured mode (it beats at each set-up phase), resumes if asked
    or restarted, trains under heartbeats, and meets the other ranks at a final barrier. The
    heartbeats start after set-up, whose long native calls (partitioning) may hold the GIL; the
    watchdog's timeout_s covers set-up."""
    import deepspeed.comm as dist

    from dsgraph.train import failures
    from dsgraph.train.trainer import Trainer

    trainer = Trainer(cfg, ds_config, device, heartbeat=watchdog.beat)
    restart = _restart_state(cfg, trainer)
    if args.resume or (restart is not None and restart[0]):
        watchdog.beat("loading the latest checkpoint")
        trainer.resume()
    if restart is not None:  # rank 0 says so; the metrics get a restart row
        event = failures.restart_event(restart[1], trainer.world, trainer.start_epoch, trainer.engine.global_steps)
        trainer.pending_rows.append(event)
        if trainer.pg.rank == 0:
            print(f"dsgraph: {event['text'][1]}", flush=True)
    with _heartbeats(cfg, trainer.pg.rank, prefix, watchdog):
        trainer.fit()
    watchdog.beat("the final barrier")
    dist.barrier()


def _restart_state(cfg: DsgraphConfig, trainer) -> tuple[bool, list[dict]] | None:
    """Under ``dsgraph train --max-restarts`` (torch elastic), on an attempt that follows a failure:
    (whether there is a checkpoint to resume from, the failures recorded so far); else None. Rank 0
    decides (``failures.restart_state``), every rank follows."""
    from dsgraph.train import failures

    state = [failures.restart_state(cfg.checkpoint_dir) if trainer.pg.rank == 0 else None]
    if trainer.pg.world_size > 1:
        import deepspeed.comm as dist

        dist.broadcast_object_list(state, src=0)
    return state[0]


def _remove_dead_buffers(rank: int, watchdog: Watchdog) -> None:
    """Once per machine (local rank 0): removes DeepSpeed all-reduce buffers that runs which ended
    without cleaning up left in /dev/shm, and says how much memory that freed."""
    from dsgraph.runtime import shm

    if int(os.environ.get("LOCAL_RANK", rank)) != 0:
        return
    watchdog.beat("start-up: removing shared memory left by finished runs")
    freed = shm.sweep_dead_buffers()
    if freed.files:
        print(freed.message(), flush=True)


def _follow_plan(cfg: DsgraphConfig) -> DsgraphConfig:
    """The run's config with its launch plan's strategy (``agp.plan``, from ``--nprocs auto``); a
    ValueError naming the command that launches the pick when the job's world size is not the plan's."""
    if not cfg.agp.plan:
        return cfg
    from dsgraph.agp.launch import LaunchPlan, check_world

    plan = LaunchPlan.load(cfg.agp.plan)
    args = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]
    script = sys.argv[0] if sys.argv[0].endswith(".py") else "--module dsgraph.train.main"
    relaunch = " ".join(["deepspeed", f"--num_accelerators {plan.ranks}", script, *args])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    followed = check_world(plan, cfg.agp.plan, cfg, world, relaunch)
    if os.environ.get("RANK", "0") == "0":
        changed = f" instead of '{cfg.strategy}'" if cfg.strategy != plan.strategy else ""
        print(f"dsgraph: launch plan {cfg.agp.plan}: {plan.strategy}{changed} on {plan.ranks} ranks", flush=True)
    return followed


def _fit_memory(cfg: DsgraphConfig, ds_config: dict) -> DsgraphConfig:
    """The run's config after its mode's memory prediction (``Mode.fit_memory``: ``agp/run_memory.py``,
    isolated mode's ``pair_memory.py``): refused (ValueError) when it is predicted not to fit, with
    checkpointing turned on when only that makes a full-graph run fit. A CPU run's
    check, made on every rank before the process group exists and before any graph is built or loaded,
    with the world size the launcher set (``WORLD_SIZE``; a run without it is not checked)."""
    import deepspeed

    from dsgraph.modes.registry import MODES

    if deepspeed.get_accelerator().device_name() == "cuda" or "WORLD_SIZE" not in os.environ:
        return cfg
    cfg, note = MODES[cfg.mode].fit_memory(cfg, ds_config, int(os.environ["WORLD_SIZE"]))
    if note and os.environ.get("RANK", "0") == "0":
        print(f"dsgraph: {note}", flush=True)
    return cfg


def _cpu_optimizer(ds_config: dict, rank: int) -> dict:
    """On CPU, Adam/AdamW through torch.optim, so start-up needs no C++ build (see
    ``extensions.prefer_torch_adam``)."""
    from dsgraph.runtime import extensions

    ds_config, changed = extensions.prefer_torch_adam(ds_config)
    if changed and rank == 0:
        print(
            'dsgraph: CPU run: Adam through torch.optim ("torch_adam": true), so no C++ op is built at start-up; '
            'set "torch_adam": false in the optimizer params for DeepSpeed\'s FusedAdam',
            flush=True,
        )
    return ds_config


def _exit_peer_failure(rank: int | None, timeout_s: float, err: BaseException) -> None:
    """A peer died or went silent: stop now, without waiting on it again (no barrier, no destroy)."""
    from dsgraph.runtime.watchdog import EXIT_PEER_FAILURE, peer_failure_message
    from dsgraph.train import failures

    detail = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
    message = peer_failure_message(rank, timeout_s, detail)
    print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    failures.record(rank, message)
    os._exit(EXIT_PEER_FAILURE)


if __name__ == "__main__":
    sys.exit(main())
