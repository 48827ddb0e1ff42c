"""One layer's forward + backward time, GCN and SAGE against attention of the same width, on one
process (CPU backend by default): the blocks of ``dsgraph/models`` on an R-MAT graph with self
loops, run alternately (attention, gcn, sage, attention, ...) so that load on the machine touches
each alike; prints min and median per block, and per block the ratio of its time to the
attention's in the same round, min and median over the rounds (the criterion of issue 41: at most
0.6 on rmat:18).

    python -m tools.reports.conv_cost --dataset rmat:18 --hidden 64 --heads 8 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from dsgraph.graph.datasets import load_dataset
from dsgraph.models.blocks import AttentionBlock
from dsgraph.models.conv import ConvBlock
from dsgraph.ops import sparse_attention


def _blocks(hidden: int, heads: int) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {
        "attention": AttentionBlock(hidden, hidden, heads, 0.0),
        "gcn": ConvBlock("gcn", hidden, hidden, heads, 0.0),
        "sage": ConvBlock("sage", hidden, hidden, heads, 0.0),
    }


def _seconds(block, h, attention) -> float:
    start = time.perf_counter()
    out = block(h, attention, None, 0, 0, 1)
    out.sum().backward()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="rmat:18")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", default="cpu")
    args = parser.parse_args(argv)
    graph = load_dataset(args.dataset).with_self_loops()
    rowptr, col = graph.rowptr, graph.col

    def attention(q, k, v):
        return sparse_attention(rowptr, col, q, k, v, backend=args.backend)

    attention.degrees = rowptr.diff()
    h = torch.randn(graph.num_nodes, args.hidden, requires_grad=True)
    blocks = _blocks(args.hidden, args.heads)
    times: dict[str, list[float]] = {name: [] for name in blocks}
    for _ in range(args.rounds + 1):  # the first round warms up (numba compiles, caches fill)
        for name, block in blocks.items():
            times[name].append(_seconds(block, h, attention))
    print(
        f"{args.dataset}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges (self loops included), "
        f"hidden {args.hidden}, {args.heads} heads, backend {args.backend}, {args.rounds} alternated rounds"
    )
    base = times["attention"][1:]
    for name, values in times.items():
        kept = values[1:]
        ratios = [t / b for t, b in zip(kept, base)]  # against the attention of the same round
        print(
            f"  {name:9s} min {min(kept):.3f} s  median {statistics.median(kept):.3f} s  "
            f"/ attention per round: min {min(ratios):.2f}  median {statistics.median(ratios):.2f}  "
            f"max {max(ratios):.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
