"""The ``dsgraph`` console command (also ``python -m dsgraph``).

Each subcommand lives in the module that owns it; this file only maps names to their ``main``.
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module with main(argv) -> int, one-line help)
SUBCOMMANDS = {
    "train": ("dsgraph.train.launcher", "launch training with the deepspeed launcher"),
    "predict": (
        "dsgraph.train.predict_launcher",
        "logits and embeddings of a checkpoint (any ranks, any ZeRO stage) into a .npz",
    ),
    "partition": ("dsgraph.graph.partition_cli", "split a graph into a partition store (one part per rank)"),
    "convert": ("dsgraph.graph.convert", "convert an OGB folder, edge list or .npz into a .npz or partition store"),
    "encode": ("dsgraph.graph.encode.cli", "compute RWSE / LapPE encodings once and store them beside the features"),
    "profile": ("dsgraph.agp.profile_cli", "measure alpha and beta of this system into an AGP profile JSON"),
    "plan": ("dsgraph.agp.plan_cli", "predict time and memory per (strategy, ranks) for a graph and pick one"),
    "checkpoint": (
        "dsgraph.train.checkpoint_cli",
        "verify checkpoints, convert one to universal (any world size), export fp32",
    ),
}


# (subcommand, option) -> the module that runs the subcommand when the option is given
ROUTES = {("plan", "--config"): "dsgraph.train.memory_plan"}  # a training config's memory, without a profile


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: dsgraph SUBCOMMAND [--help] [ARGS]\n\nsubcommands:")
        for name, (_, text) in SUBCOMMANDS.items():
            print(f"  {name:<{max(map(len, SUBCOMMANDS))}}  {text}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"dsgraph: unknown subcommand '{name}'; choose from {', '.join(SUBCOMMANDS)}", file=sys.stderr)
        return 2
    routed = [module for (sub, option), module in ROUTES.items() if sub == name and option in rest]
    module = importlib.import_module(routed[0] if routed else SUBCOMMANDS[name][0])
    return int(module.main(rest) or 0)
