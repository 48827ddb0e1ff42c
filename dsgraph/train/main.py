"""Training entry point, run under a launcher on every rank:

    deepspeed --num_accelerators 2 launch/train.py --deepspeed_config ds_configs/cpu_quickstart.json

Settings come from the config's "dsgraph" section; command-line options override them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from dsgraph.graph.partition import METHODS
from dsgraph.parallel import get_strategy, strategy_names
from dsgraph.train.config import DsgraphConfig, load_ds_config
from dsgraph.train.modes import mode_names

DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "ds_configs", "cpu_quickstart.json")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="launch/train.py",
        description="Full-graph Graph Transformer training on DeepSpeed. Run it under `deepspeed` (or mpirun); "
        "settings live in the config's \"dsgraph\" section and these options override them.",
    )
    p.add_argument("--deepspeed_config", "--config", dest="config", required=True, help="DeepSpeed JSON with a \"dsgraph\" section")
    p.add_argument("--dataset", help="cora | rmat:SCALE[:EDGE_FACTOR] | PATH.npz")
    strategies = "; ".join(f"{name}: {get_strategy(name).summary}" for name in strategy_names())
    p.add_argument("--strategy", choices=[*strategy_names(), *(m for m in mode_names() if m != "full")],
                   help=f"graph-parallel attention strategy ({strategies}). 'sampled' and 'isolated' are older "
                   "spellings of --mode; a strategy without --mode trains the full graph")
    p.add_argument("--mode", choices=mode_names(), help="training mode: full graph (default), sampled mini-batches, "
                   "or isolated (Grappa) training")
    p.add_argument("--agp-profile", dest="agp_profile", metavar="JSON", help="AGP profile for --strategy auto (`dsgraph profile`)")
    p.add_argument("--trace-steps", dest="trace_steps", metavar="A:B",
                   help="record torch.profiler traces of steps A..B-1 on every rank (open in Perfetto)")
    p.add_argument("--trace-dir", dest="trace_dir", help="folder for the traces (default runs/traces)")
    p.add_argument("--partitions", metavar="DIR", help="partition store with one part per rank (`dsgraph partition`); "
                   "each rank memory-maps only its own part")
    p.add_argument("--partition-method", dest="partition_method", choices=list(METHODS),
                   help="in-memory partitioning for --strategy halo without --partitions (default metis)")
    p.add_argument("--timeout", type=float, dest="timeout_s", metavar="SECONDS",
                   help="stop every rank if another rank dies or is silent this long (default 300)")
    p.add_argument("--backend", choices=["auto", "reference", "cpu", "cuda"], help="sparse attention kernel")
    p.add_argument("--epochs", type=int, help="number of full-graph epochs (one optimizer step each)")
    p.add_argument("--seed", type=int, help="seed for parameters, dropout masks and synthetic data")
    p.add_argument("--eval-every", type=int, dest="eval_every", help="evaluate every this many epochs")
    p.add_argument("--metrics-out", dest="metrics_out", help="JSON-lines metrics file (rank 0 writes it)")
    p.add_argument("--checkpoint-dir", dest="checkpoint_dir", help="folder for DeepSpeed checkpoints")
    p.add_argument("--checkpoint-every", type=int, dest="checkpoint_every", help="save every this many epochs (0: never)")
    p.add_argument("--resume", action="store_true", help="resume from the latest checkpoint in --checkpoint-dir")
    p.add_argument("--local_rank", type=int, default=-1, help=argparse.SUPPRESS)  # passed by the deepspeed launcher
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        ds_config, cfg = load_ds_config(args.config)
        overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(DsgraphConfig) if getattr(args, f.name, None) is not None}
        if args.strategy in strategy_names() and args.mode is None:
            overrides["mode"] = "full"  # --strategy X picks full-graph training with X, whatever the file's mode
        cfg = DsgraphConfig.from_dict({**cfg.to_dict(), **overrides}, source="command line")
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph: error: {err}", file=sys.stderr)
        return 2

    import deepspeed.comm as dist

    from dsgraph.train.trainer import Trainer, init_distributed
    from dsgraph.train.watchdog import EXIT_PEER_FAILURE, Watchdog, is_peer_failure, peer_failure_message

    device = init_distributed(cfg.timeout_s)
    rank = dist.get_rank()
    try:
        with Watchdog(rank, cfg.timeout_s) as watchdog:
            trainer = Trainer(cfg, ds_config, device, heartbeat=watchdog.beat)
            if args.resume:
                trainer.resume()
            trainer.fit()
            watchdog.beat("the final barrier")
            dist.barrier()
        dist.destroy_process_group()
        return 0
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph: error (rank {rank}): {err}", file=sys.stderr)
        dist.destroy_process_group()
        return 2
    except Exception as err:
        if not is_peer_failure(err):
            dist.destroy_process_group()
            raise
        # a peer died or went silent: stop now, without waiting on it again (no barrier, no destroy)
        print(peer_failure_message(rank, cfg.timeout_s, f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"),
              file=sys.stderr, flush=True)  # fmt: skip
        sys.stdout.flush()
        os._exit(EXIT_PEER_FAILURE)


if __name__ == "__main__":
    sys.exit(main())
