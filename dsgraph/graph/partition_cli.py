"""``dsgraph partition``: split a dataset into a partition store that ranks memory-map part by part.

Example::

    dsgraph partition --dataset rmat:20 --parts 4 --method metis --out parts/rmat20-4

The default method 'auto' runs METIS in memory where the graph fits the memory budget and writes
balanced ranges out of core beyond it (``partition_choice.py``); the choice is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from dsgraph.graph.datasets import load_dataset
from dsgraph.graph.partition import (
    METHODS,
    METIS_BALANCE,
    PartitionQuality,
    halo_ids,
    partition_nodes,
    partition_quality,
    relabel,
)
from dsgraph.graph.partition_choice import AUTO, choose, default_budget, graph_size
from dsgraph.graph.store import write_store
from dsgraph.graph.store_stream import write_store_streamed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsgraph partition",
        description="Partition a graph into contiguous id ranges and write the partition store "
        "(META.json with checksums, one folder of .npy arrays per part).",
    )
    parser.add_argument("--dataset", required=True, help="cora, rmat:SCALE[:EDGE_FACTOR] or a path to a .npz file")
    parser.add_argument("--parts", type=int, required=True, help="number of parts (= ranks of the training job)")
    parser.add_argument(
        "--method",
        choices=(AUTO, *METHODS),
        default=AUTO,
        help="metis: fewest cut edges; random; contiguous: equal node ranges; "
        "balanced: contiguous ranges with equal in-edge work; auto: metis where the graph fits "
        "--memory-gb, balanced out of core beyond (default: auto)",
    )
    parser.add_argument(
        "--memory-gb",
        type=float,
        help="memory budget of the in-memory path in GiB; contiguous methods build out of core above it "
        "(default: half the available memory)",
    )
    parser.add_argument(
        "--metis-balance",
        choices=METIS_BALANCE,
        default="nodes",
        help="what metis keeps equal across parts: node counts, or in-edges (attention work) "
        "at the price of more cut edges (default: nodes)",
    )
    parser.add_argument("--out", required=True, help="output folder (must be empty or absent unless --force)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random and metis methods (default: 0)")
    parser.add_argument(
        "--dataset-seed", type=int, default=0, help="seed of synthetic datasets such as rmat (default: 0)"
    )
    parser.add_argument("--force", action="store_true", help="replace an existing partition store in --out")
    parser.add_argument("--stats-json", metavar="FILE", help="also write the quality figures and step times to FILE")
    parser.add_argument("--quiet", action="store_true", help="no progress bars or phase messages")
    return parser


def format_quality(quality: PartitionQuality, method: str) -> str:
    """A table with one line per part and a summary line."""
    lines = [
        f"partition quality ({method}, {quality.num_parts} parts): edge cut {quality.edge_cut_pct:.2f}% "
        f"({quality.cut_edges:,} of {quality.num_edges:,} edges), node balance {quality.node_balance:.3f}, "
        f"edge balance {quality.edge_balance:.3f} (max/mean)",
        f"{'part':>5} {'nodes':>12} {'in-edges':>14} {'halo nodes':>12} {'halo/nodes':>11}",
    ]
    for r, (nodes, edges, halo) in enumerate(zip(quality.part_nodes, quality.part_edges, quality.halo_sizes)):
        ratio = halo / nodes if nodes else 0.0
        lines.append(f"{r:>5} {nodes:>12,} {edges:>14,} {halo:>12,} {ratio:>11.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.parts < 1:
        print("dsgraph partition: --parts must be at least 1", file=sys.stderr)
        return 2
    began = time.perf_counter()
    timings: dict[str, float] = {}

    def log(message: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - began:7.1f}s] {message}", file=sys.stderr, flush=True)

    def timed(step: str, fn, *fn_args, **fn_kwargs):
        t0 = time.perf_counter()
        result = fn(*fn_args, **fn_kwargs)
        timings[step] = time.perf_counter() - t0
        return result

    try:
        size, quality = _build(args, log, timed)
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        print(f"dsgraph partition: {err}", file=sys.stderr)
        return 1
    timings["total"] = time.perf_counter() - began
    print(format_quality(quality, args.method))
    steps = ", ".join(f"{step} {timings[step]:.1f}s" for step in ("dataset", "partition", "write") if step in timings)
    print(f"store written to {args.out} in {timings['total']:.1f}s ({steps})")
    if args.stats_json:
        _write_stats(args, size, timings, quality)
    return 0


def _build(args, log, timed):
    """Chooses the method and the path (printed), then writes the store; (num_nodes, num_edges), quality."""
    if args.memory_gb is not None and args.memory_gb <= 0:
        raise ValueError(f"--memory-gb must be positive, got {args.memory_gb}")
    budget = int(args.memory_gb * 2**30) if args.memory_gb is not None else default_budget()
    log(f"sizing dataset {args.dataset}")
    size = timed("dataset", graph_size, args.dataset, args.dataset_seed, not args.quiet)
    choice = choose(args.method, size, budget, args.dataset)
    print(f"dsgraph partition: method {choice.reason}", flush=True)
    args.method = choice.method
    if not choice.out_of_core:
        graph, quality = _partition_and_write(args, log, timed)
        return (graph.num_nodes, graph.num_edges), quality
    log(f"writing {args.parts} {choice.method} parts of {size.path} to {args.out} out of core")
    _, quality = timed(
        "write",
        write_store_streamed,
        size.path,
        args.parts,
        choice.method,
        args.out,
        scratch=os.path.dirname(os.path.abspath(args.out)),
        dataset=args.dataset,
        extra={"dataset_seed": args.dataset_seed, "out_of_core": True},
        overwrite=args.force,
        progress=not args.quiet,
    )
    return (size.num_nodes, quality.num_edges), quality


def _partition_and_write(args, log, timed):
    """Load, partition, relabel, find the halos and write the store; (the relabelled graph, the
    partition's quality). ``timed(step, fn, ...)`` runs a phase and records its seconds."""
    log(f"loading dataset {args.dataset}")
    graph = timed("load", load_dataset, args.dataset, args.dataset_seed)
    log(f"partitioning {graph.num_nodes:,} nodes and {graph.num_edges:,} edges into {args.parts} parts ({args.method})")
    parts = timed(
        "partition",
        partition_nodes,
        graph,
        args.parts,
        args.method,
        args.seed,
        log,
        metis_balance=args.metis_balance,
    )
    log("relabelling nodes so each part is one contiguous id range")
    graph, perm, node_ranges = timed("relabel", relabel, graph, parts, args.parts)
    del parts
    halos = timed("halo ids", _halos, graph, node_ranges, not args.quiet)
    quality = partition_quality(graph, node_ranges, halos)
    log(f"writing the store to {args.out}")
    timed(
        "write",
        write_store,
        graph,
        perm,
        node_ranges,
        args.out,
        args.method,
        dataset=args.dataset,
        seed=args.seed,
        halos=halos,
        overwrite=args.force,
        progress=not args.quiet,
        extra={
            "dataset_seed": args.dataset_seed,
            "quality": quality.as_dict(),
            **({"metis_balance": args.metis_balance} if args.method == "metis" else {}),
        },
    )
    return graph, quality


def _write_stats(args, size: tuple[int, int], timings: dict[str, float], quality) -> None:
    """``--stats-json``: the run's sizes, phase times and partition quality."""
    with open(args.stats_json, "w") as f:
        json.dump(
            {
                "dataset": args.dataset,
                "method": args.method,
                "parts": args.parts,
                "num_nodes": size[0],
                "num_edges": size[1],
                "timings_s": timings,
                "quality": quality.as_dict(),
            },
            f,
            indent=1,
        )


def _halos(graph, node_ranges: np.ndarray, progress: bool) -> list[np.ndarray]:
    ranges = node_ranges.tolist()
    if progress:
        from tqdm import tqdm

        ranges = tqdm(ranges, desc="halo ids", unit="part")
    return [halo_ids(graph.rows(start, end)[1].numpy(), start, end) for start, end in ranges]
