"""``dsgraph plan --config CONFIG``: a training run's predicted peak memory per rank, by term, and
whether it fits this machine, before anything is loaded (``dsgraph/agp/run_memory.py``; no profile
needed). The options override the config's ``dsgraph`` section as ``launch/train.py``'s do."""

from __future__ import annotations

import argparse
import sys

from dsgraph.agp.run_memory import dtype_bytes_of, memory_limit_mb
from dsgraph.modes.registry import MODES
from dsgraph.train.config import load_ds_config, with_overrides


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dsgraph plan --config",
        description="Predict a CPU run's peak memory per rank (process floor, graph, activations, optimizer "
        "states, what the kernels keep) from its config and its graph's sizes, before loading it: full-graph "
        "runs, and isolated and sampled runs from a partition store (their largest chunk pair, or a batch drawn "
        "from the store).",
    )
    p.add_argument("--config", required=True, help='DeepSpeed JSON with a "dsgraph" section')
    p.add_argument("--world-size", type=int, required=True, help="ranks of the run")
    p.add_argument("--dataset", help="rmat:SCALE[:EDGE_FACTOR] (sizes estimated from the name)")
    p.add_argument("--partitions", metavar="DIR", help="partition store of the run (exact sizes from its META.json)")
    p.add_argument("--strategy", help="graph-parallel strategy (not auto)")
    p.add_argument("--memory-limit-mb", type=float, dest="memory_limit_mb", help="per-rank limit to check against")
    p.add_argument("--ranks-per-node", type=int, help="ranks sharing this machine's memory (default: world size)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    keys = ("dataset", "partitions", "strategy", "memory_limit_mb")
    try:
        if args.world_size < 1:
            raise ValueError(f"--world-size must be >= 1, got {args.world_size}")
        ds_config, cfg = load_ds_config(args.config)
        cfg = with_overrides(cfg, {k: getattr(args, k) for k in keys if getattr(args, k) is not None})
        b = dtype_bytes_of(ds_config)
        mode = MODES[cfg.mode]
        predicted = mode.predict_memory(cfg, b, args.world_size)
        if predicted is None:
            raise ValueError(
                "only full-graph runs of a named strategy on a partition store or an rmat:SCALE dataset, and "
                "isolated and sampled runs from a partition store (one part per rank for sampled) are predicted "
                f"(mode {cfg.mode}, strategy {cfg.strategy}, dataset {cfg.dataset}, partitions {cfg.partitions})"
            )
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph plan: error: {err}", file=sys.stderr)
        return 2
    dtype = "bf16" if b == 2 else "fp32"
    run = cfg.strategy if cfg.mode == "full" else cfg.mode
    print(f"memory per rank of {run} on {args.world_size} ranks ({dtype}, {cfg.layers} layers, d={cfg.hidden}):")
    for line in predicted.lines():
        print("  " + line)
    limit, source = memory_limit_mb(cfg, args.ranks_per_node or args.world_size)
    if predicted.total_mb <= limit:
        print(f"fits the limit of {limit:,.0f} MB per rank ({source})")
        return 0
    print(f"over the limit of {limit:,.0f} MB per rank ({source}); predicted to fit:")
    for line in mode.memory_alternatives(cfg, predicted, b, args.world_size, limit):
        print("  " + line)
    return 0
