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
from dsgraph.train.config import DsgraphConfig, load_ds_config

DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "ds_configs", "cpu_quickstart.json")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="launch/train.py",
        description="Full-graph Graph Transformer training on DeepSpeed. Run it under `deepspeed` (or mpirun); "
        "settings live in the config's \"dsgraph\" section and these options override them.",
    )
    p.add_argument("--deepspeed_config", "--config", dest="config", required=True, help="DeepSpeed JSON with a \"dsgraph\" section")
    p.add_argument("--dataset", help="cora | rmat:SCALE[:EDGE_FACTOR] | PATH.npz")
    p.add_argument("--strategy", choices=["ag", "a2a", "halo", "sampled", "isolated", "auto"],
                   help="graph-parallel attention strategy, sampled mini-batches, isolated (Grappa) training, "
                   "or auto (AGP picks ag, a2a or halo from --agp-profile)")
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
        cfg = DsgraphConfig.from_dict({**cfg.to_dict(), **overrides}, source="command line")
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph: error: {err}", file=sys.stderr)
        return 2

    import deepspeed.comm as dist

    from dsgraph.train.isolated import IsolatedTrainer
    from dsgraph.train.sampled import SampledTrainer
    from dsgraph.train.trainer import Trainer, init_distributed
    from dsgraph.train.watchdog import EXIT_PEER_FAILURE, Watchdog, is_peer_failure, peer_failure_message

    device = init_distributed(cfg.timeout_s)
    rank = dist.get_rank()
    try:
        with Watchdog(rank, cfg.timeout_s) as watchdog:
            trainer_cls = {"sampled": SampledTrainer, "isolated": IsolatedTrainer}.get(cfg.strategy, Trainer)
            trainer = trainer_cls(cfg, ds_config, device, heartbeat=watchdog.beat)
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
