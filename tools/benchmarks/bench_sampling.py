#!/usr/bin/env python
"""Benchmarks the sampled mini-batch pipeline and prints one table per measurement:

1. dedup: nodes per batch in the per-seed sampling trees (before) and after the per-batch dedup,
   the reduction, and the time to sample and to gather the features;
2. prefetch: the training loop's wait per step for the next batch with prefetch depth 0
   (prepared in the loop) and depth 4 (a background thread), where each step is the real Graph
   Transformer's forward, backward and optimizer step on the batch's subgraph;
3. cache: the hit rate of a feature cache holding a share of the nodes, chosen by expected sampling
   frequency (what training uses), by in-degree, and at random (the no-skill baseline);
4. feature memory of the table in fp32 and bf16.

    .venv/bin/python -m tools.benchmarks.bench_sampling [--dataset rmat:18] [--fanouts 10 10] [--batch-size 1024]
        [--batches 20] [--steps 12] [--depths 0 4] [--cache-fraction 0.1]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from dsgraph.graph import load_dataset
from dsgraph.models import GraphTransformer
from dsgraph.modes.ranks import local_attention
from dsgraph.modes.sampled import (
    BatchBuilder,
    FeatureStore,
    NeighborSampler,
    Prefetcher,
    epoch_batches,
    in_degree_scores,
    sampling_frequency_scores,
)
from dsgraph.modes.sampled.mode import batch_graph


def bench_dedup(builder: BatchBuilder, batches: list[np.ndarray], count: int) -> None:
    rows = [builder.build(0, i, batches[i]) for i in range(count)]
    before = np.mean([b.graph.nodes_before_dedup for b in rows])
    after = np.mean([b.graph.num_nodes for b in rows])
    edges = np.mean([b.graph.num_edges for b in rows])
    print(f"\n### Dedup ({count} batches)\n")
    print("| nodes/batch before dedup | after dedup | reduction | edges/batch | sample ms | gather ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    print(
        f"| {before:.0f} | {after:.0f} | {100 * (1 - after / before):.1f}% | {edges:.0f} | "
        f"{1e3 * np.median([b.sample_time_s for b in rows]):.1f} "
        f"| {1e3 * np.median([b.gather_time_s for b in rows]):.1f} |"
    )


def bench_prefetch(
    builder: BatchBuilder, batches: list[np.ndarray], graph, steps: int, depths: list[int], hidden: int
) -> None:
    print(
        f"\n### Prefetch ({steps} training steps per depth; the first step's wait is excluded: nothing can be ahead of "
        "it)\n"
    )
    print("| prefetch depth | mean wait/step ms | total wait s | mean step compute ms | loop s |")
    print("| --- | --- | --- | --- | --- |")
    result = {}
    for depth in depths:
        torch.manual_seed(0)
        model = GraphTransformer(
            graph.num_features, graph.num_classes, hidden=hidden, heads=8, layers=len(builder.sampler.fanouts)
        )
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        computes = []
        start = time.perf_counter()
        with Prefetcher(lambda i: builder.build(0, i, batches[i]), steps, depth) as items:
            for step, batch in enumerate(items):
                t = time.perf_counter()
                sub = batch.graph
                attention = local_attention(batch_graph(batch, graph.num_features, graph.num_classes), "auto")
                logits = model(batch.x.float(), attention, sub.node_ids, step)
                F.cross_entropy(logits[: sub.num_seeds], batch.y).backward()
                opt.step()
                opt.zero_grad()
                computes.append(time.perf_counter() - t)
            waits = items.waits[1:]
        loop = time.perf_counter() - start
        result[depth] = sum(waits)
        print(
            f"| {depth} | {1e3 * np.mean(waits):.1f} | {sum(waits):.2f} | {1e3 * np.mean(computes):.0f} | {loop:.1f} |"
        )
    if len(depths) >= 2 and result[depths[0]] > 0:
        a, b = depths[0], depths[-1]
        print(f"\nwait reduction depth {a} -> {b}: {100 * (1 - result[b] / result[a]):.1f}%")


def bench_cache(
    graph, sampler: NeighborSampler, batches: list[np.ndarray], count: int, fraction: float, fanout: int
) -> None:
    policies = {
        "sampling frequency": sampling_frequency_scores(graph.rowptr, graph.col, fanout),
        "in-degree": in_degree_scores(graph.rowptr),
        "random": torch.from_numpy(np.random.default_rng(0).random(graph.num_nodes)),
    }
    subs = [sampler.sample(batches[i], i) for i in range(count)]
    print(f"\n### Feature cache of {100 * fraction:.0f}% of the nodes ({count} batches, rows gathered after dedup)\n")
    print("| hot nodes chosen by | cached nodes | hit rate |")
    print("| --- | --- | --- |")
    for name, scores in policies.items():
        store = FeatureStore(graph.x, cache_fraction=fraction, hot_scores=scores)
        for sub in subs:
            store.gather(sub.node_ids)
        print(f"| {name} | {store.cached_ids.numel()} | {100 * store.hit_rate:.1f}% |")


def bench_memory(graph) -> None:
    print("\n### Feature memory\n")
    print("| storage dtype | feature table MB |")
    print("| --- | --- |")
    for dtype in (torch.float32, torch.bfloat16):
        print(f"| {str(dtype).replace('torch.', '')} | {FeatureStore(graph.x, dtype=dtype).table_bytes / 2**20:.1f} |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="rmat:18")
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 10])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=20, help="batches for the dedup and cache tables")
    p.add_argument("--steps", type=int, default=12, help="training steps per prefetch depth")
    p.add_argument("--depths", type=int, nargs="+", default=[0, 4])
    p.add_argument("--cache-fraction", type=float, default=0.1)
    p.add_argument("--hidden", type=int, default=128, help="model width for the prefetch steps")
    p.add_argument("--skip", nargs="*", default=[], choices=["dedup", "prefetch", "cache", "memory"])
    args = p.parse_args(argv)
    graph = load_dataset(args.dataset)
    train = graph.train_mask.nonzero().squeeze(1).numpy()
    batches = epoch_batches(train, args.batch_size, seed=0, epoch=0)
    need = max(args.batches, args.steps)
    if len(batches) < need:
        raise ValueError(f"{args.dataset} gives {len(batches)} batches of {args.batch_size}; need {need}")
    print(
        f"{args.dataset}: {graph.num_nodes} nodes, {graph.num_edges} edges, {graph.num_features} features; "
        f"fanouts {args.fanouts}, batch {args.batch_size}, torch threads {torch.get_num_threads()}"
    )
    sampler = NeighborSampler(graph.rowptr, graph.col, args.fanouts, self_loops=True)
    hot = sampling_frequency_scores(graph.rowptr, graph.col, args.fanouts[-1])
    store = FeatureStore(graph.x, dtype=torch.float32, cache_fraction=args.cache_fraction, hot_scores=hot)
    builder = BatchBuilder(sampler, store, graph.y, seed=0)
    if "dedup" not in args.skip:
        bench_dedup(builder, batches, args.batches)
    if "prefetch" not in args.skip:
        bench_prefetch(builder, batches, graph, args.steps, args.depths, args.hidden)
    if "cache" not in args.skip:
        bench_cache(graph, sampler, batches, args.batches, args.cache_fraction, args.fanouts[-1])
    if "memory" not in args.skip:
        bench_memory(graph)
    return 0


if __name__ == "__main__":
    sys.exit(main())
