#!/usr/bin/env python
"""Bytes sent per attention layer by every registered strategy (GP-AG, GP-A2A, GP-Halo, ...),
measured from ``pg.stats`` on P gloo processes (forward and backward of one layer's exchange), on a
graph partitioned with METIS.

    .venv/bin/python -m tools.reports.halo_bytes --dataset cora --parts 4

Every strategy runs on the same relabelled graph (each rank owns one METIS part) with random
q, k, v [n, H, D] in fp32; the table shows the bytes each rank sent, their sum, and halo's share of ag's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from dsgraph.comm.ports import free_port


def _relabelled(args):
    from dsgraph.graph import load_dataset
    from dsgraph.graph.partition import partition_nodes, relabel

    graph = load_dataset(args.dataset, seed=0).with_self_loops()
    parts = partition_nodes(graph, args.parts, args.method, seed=0)
    graph, _, ranges = relabel(graph, parts, args.parts)
    return graph, (ranges[:, 1] - ranges[:, 0]).tolist()


def _rank(rank: int, args, port: int, out_dir: str) -> None:
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(args.parts), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    import deepspeed.comm as dist
    import torch

    from dsgraph.comm import GraphParallelGroup, RowSplit
    from dsgraph.modes.ranks import rank_attention
    from dsgraph.parallel import StrategyContext, auto_candidates, get_strategy
    from dsgraph.train.trainer import init_distributed

    torch.set_num_threads(1)
    init_distributed(mpi_discovery=False)
    graph, counts = _relabelled(args)
    pg = GraphParallelGroup.from_world().with_split(RowSplit(tuple(counts)))
    start = pg.rows[0]
    n, head_dim = counts[rank], args.hidden // args.heads
    result = {}
    for name in auto_candidates():  # every concrete strategy
        if get_strategy(name).infeasible(args.heads, args.parts):
            continue
        pg, _, attention = rank_attention(
            graph, pg, name, StrategyContext(heads=args.heads, backend="reference"), partition_method=None
        )
        gen = torch.Generator().manual_seed(start)
        q, k, v = (torch.randn(n, args.heads, head_dim, generator=gen, requires_grad=True) for _ in range(3))
        pg.stats.reset()
        y = attention(q, k, v)
        forward = pg.stats.bytes_sent
        y.backward(torch.ones_like(y))
        result[name] = {"forward": forward, "backward": pg.stats.bytes_sent - forward}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dataset", default="cora", help="cora | rmat:SCALE[:EDGE_FACTOR] | PATH.npz (default cora)")
    p.add_argument("--parts", type=int, default=4, help="ranks = METIS parts (default 4)")
    p.add_argument("--method", default="metis", help="partition method (default metis)")
    p.add_argument("--hidden", type=int, default=128, help="hidden size H*D (default 128)")
    p.add_argument("--heads", type=int, default=8, help="attention heads H (default 8)")
    args = p.parse_args(argv)

    import torch.multiprocessing as mp

    from dsgraph.comm import RowSplit
    from dsgraph.graph.partition import partition_quality
    from dsgraph.parallel import auto_candidates

    graph, counts = _relabelled(args)
    starts = RowSplit(tuple(counts)).starts
    quality = partition_quality(graph, [[starts[r], starts[r + 1]] for r in range(args.parts)])
    with tempfile.TemporaryDirectory() as out_dir:
        mp.start_processes(_rank, args=(args, free_port(), out_dir), nprocs=args.parts, start_method="spawn")
        ranks = []
        for r in range(args.parts):
            with open(os.path.join(out_dir, f"rank{r}.json")) as f:
                ranks.append(json.load(f))
    print(
        f"{args.dataset}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges (with self loops), {args.method} into "
        f"{args.parts} parts, edge cut {quality.edge_cut_pct:.2f}%, halo nodes per part {quality.halo_sizes}; "
        f"K+V fp32, hidden {args.hidden}"
    )
    print(
        f"{'strategy':>8} {'direction':>9} "
        + " ".join(f"{'rank ' + str(r):>11}" for r in range(args.parts))
        + f" {'total':>12} {'vs ag':>7}"
    )
    for name in auto_candidates():
        if name not in ranks[0]:
            continue
        for direction in ("forward", "backward"):
            per_rank = [r[name][direction] for r in ranks]
            total, ag_total = sum(per_rank), sum(r["ag"][direction] for r in ranks)
            cells = " ".join(f"{b:>11,}" for b in per_rank)
            print(f"{name:>8} {direction:>9} {cells} {total:>12,} {total / ag_total:>7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
