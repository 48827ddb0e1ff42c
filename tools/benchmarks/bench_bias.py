#!/usr/bin/env python
"""What the score bias (and the edge values) cost the sparse attention op: forward+backward of
``sparse_attention`` on one graph without a bias, with a bias [E, H], and with a bias and edge values
u [E, C] (the model's 'bias_value'), alternated round by round in one run so that the machine's
drift hits every variant alike. Prints the min and median seconds of each and their ratio to the
op without a bias (the acceptance bound for the bias is 1.3x).

Each timed call is one forward and the backward of every input that requires grad (q, k, v and the
bias); the edge values take no gradient. The graph is built once; the first round is a warm-up
(numba compiles) and is not counted.

Examples:
  python -m tools.benchmarks.bench_bias --graph rmat:18 --threads 2
  python -m tools.benchmarks.bench_bias --graph rmat:14 --rounds 3 --json-out bias.json
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from dsgraph.graph import load_dataset
from dsgraph.ops import sparse_attention
from tools.common.bench import device_label, write_json

VARIANTS = ("none", "bias", "bias+values")


OPTIONS = (  # (flag, type, default, help)
    ("--graph", str, "rmat:18", "rmat:SCALE[:EF], cora or a .npz file (default rmat:18)"),
    ("--heads", int, 8, "attention heads H (default 8)"),
    ("--dim", int, 16, "head dim D (default 16)"),
    ("--channels", int, 5, "edge value channels C, F_e + 1 in the model (default 5)"),
    ("--backend", str, "cpu", "sparse attention backend (default cpu)"),
    ("--rounds", int, 5, "timed rounds, each runs every variant once (default 5)"),
    ("--threads", int, None, "CPU threads (torch and numba; default: torch's)"),
    ("--seed", int, 0, "graph and input seed (default 0)"),
    ("--json-out", str, None, "also write the times as JSON here"),
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, kind, default, text in OPTIONS:
        p.add_argument(flag, type=kind, default=default, help=text)
    return p.parse_args(argv)


def step(variant: str, graph, tensors: dict, backend: str) -> float:
    """Seconds of one forward+backward of ``variant``."""
    q, k, v, bias, u, dy, dz = (tensors[name] for name in ("q", "k", "v", "bias", "u", "dy", "dz"))
    start = time.perf_counter()
    if variant == "none":
        y = sparse_attention(graph.rowptr, graph.col, q, k, v, backend=backend)
        torch.autograd.backward(y, dy)
    elif variant == "bias":
        y = sparse_attention(graph.rowptr, graph.col, q, k, v, bias=bias, backend=backend)
        torch.autograd.backward(y, dy)
    else:
        y, z = sparse_attention(graph.rowptr, graph.col, q, k, v, bias=bias, edge_values=u, backend=backend)
        torch.autograd.backward((y, z), (dy, dz))
    seconds = time.perf_counter() - start
    for t in (q, k, v, bias):
        t.grad = None
    return seconds


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    graph = load_dataset(args.graph, seed=args.seed)
    n, e, h, d = graph.num_nodes, graph.num_edges, args.heads, args.dim
    gen = torch.Generator().manual_seed(args.seed)
    rand = lambda *shape, grad=True: torch.randn(*shape, generator=gen).requires_grad_(grad)  # noqa: E731
    tensors = {
        "q": rand(n, h, d),
        "k": rand(n, h, d),
        "v": rand(n, h, d),
        "bias": rand(e, h),
        "u": rand(e, args.channels, grad=False),
        "dy": rand(n, h, d, grad=False),
        "dz": rand(n, h, args.channels, grad=False),
    }
    times = {variant: [] for variant in VARIANTS}
    for r in range(args.rounds + 1):
        for variant in VARIANTS if r % 2 else VARIANTS[::-1]:  # alternate the order too
            seconds = step(variant, graph, tensors, args.backend)
            if r:  # round 0: warm-up
                times[variant].append(seconds)
    print(
        f"# {args.graph}: N={n:,} E={e:,} H={h} D={d} C={args.channels} fp32, backend {args.backend}, "
        f"{device_label(torch.device('cpu'))}, "
        f"{args.rounds} alternated rounds after a warm-up"
    )
    print("| variant | min s | median s | min / none | median / none |\n|---|---|---|---|---|")
    base = times["none"]
    for variant, ts in times.items():
        print(
            f"| {variant} | {min(ts):.3f} | {statistics.median(ts):.3f} | {min(ts) / min(base):.2f}x | "
            f"{statistics.median(ts) / statistics.median(base):.2f}x |"
        )
    write_json(
        args.json_out,
        {
            "format": "dsgraph-bench-bias",
            "graph": args.graph,
            "nodes": n,
            "edges": e,
            "heads": h,
            "dim": d,
            "channels": args.channels,
            "backend": args.backend,
            "threads": torch.get_num_threads(),
            "times_s": times,
        },
    )


if __name__ == "__main__":
    main()
