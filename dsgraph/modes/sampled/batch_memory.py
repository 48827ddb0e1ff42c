"""Sampled training from a partition store, its peak memory per rank predicted before training.

A rank holds its own part (memory-mapped; an epoch and an evaluation read all of it) and a
mini-batch at a time, with ``prefetch_depth`` more prepared ahead. The batch is counted, not
estimated: the plan draws one rank's share of a global batch of training rows from the store's
parts, in this one process, with the sampler's own keyed draws and compaction (``RemoteSampler``
with every part answering locally), and takes its nodes and edges after deduplication. The
prediction is a one-rank step on that subgraph (``agp.run_memory.predict_subgraph``; a sampled
batch runs the plain op), the part as read, the batches prepared ahead, every rank's training ids
and what evaluation keeps of its rows.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from dsgraph.agp.run_memory import MB, RunMemory, predict_subgraph
from dsgraph.graph.store import load_permutation, open_array, part_dir_name, read_meta
from dsgraph.modes.sampled.remote import RemoteSampler
from dsgraph.modes.sampled.sampler import batch_key, draw_offsets

FEATURE_BYTES = {"float32": 4, "bfloat16": 2}


@dataclass(frozen=True)
class BatchSize:
    seeds: int
    nodes: int  # after deduplication
    edges: int  # self loops included
    train_rows: int  # every rank's training rows (each rank holds their ids)
    eval_rows: int  # the most rows in a split any part has (a rank keeps their outputs)


@dataclass(frozen=True)
class _PartRows:
    """What the plan reads of a part, memory-mapped (checked against META.json for size and dtype;
    training checks the contents of its own part when it opens it)."""

    start: int
    end: int
    rowptr: np.ndarray
    col: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray


def _part_rows(store_dir: str, meta: dict, rank: int) -> _PartRows:
    start, end = (int(v) for v in meta["node_ranges"][rank])
    n, e = end - start, int(meta["part_num_edges"][rank])
    shapes = {"rowptr": (np.int64, (n + 1,)), "col": (np.int32, (e,))}
    shapes |= {name: (np.bool_, (n,)) for name in ("train_mask", "val_mask", "test_mask")}
    arrays = {
        name: open_array(store_dir, f"{part_dir_name(rank)}/{name}.npy", meta, dtype, shape, verify=False)
        for name, (dtype, shape) in shapes.items()
    }
    return _PartRows(start=start, end=end, **arrays)


class _EveryPartHere(RemoteSampler):
    """The remote sampler with every part of the store answering its draws in this process."""

    def __init__(self, store_dir: str, fanouts: list[int], self_loops: bool):
        super().__init__(view=None, exchange=None, fanouts=fanouts, self_loops=self_loops)
        meta = read_meta(store_dir)
        self.parts = [_part_rows(store_dir, meta, r) for r in range(int(meta["num_parts"]))]
        self.ends = np.array([p.end for p in self.parts], dtype=np.int64)
        self.perm = load_permutation(store_dir)  # relabelled -> original id, memory-mapped

    def _draw(self, nodes, nodes_new, fanout, key):
        owner_part = np.searchsorted(self.ends, nodes_new, side="right")
        counts = np.zeros(nodes.size, dtype=np.int64)
        owners, sources = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for p in np.unique(owner_part):
            mine = np.flatnonzero(owner_part == p)
            part = self.parts[p]
            local = nodes_new[mine] - part.start
            starts = np.asarray(part.rowptr[local], dtype=np.int64)
            degrees = np.asarray(part.rowptr[local + 1], dtype=np.int64) - starts
            owner, offset = draw_offsets(nodes[mine], degrees, fanout, key)  # keyed by original id
            counts[mine] = np.bincount(owner, minlength=mine.size)
            owners.append(mine[owner])
            sources.append(np.asarray(part.col[starts[owner] + offset], dtype=np.int64))
        src_new = np.concatenate(sources)
        return counts, np.concatenate(owners), np.asarray(self.perm[src_new], dtype=np.int64), src_new


@functools.lru_cache(maxsize=4)
def one_batch(store_dir: str, fanouts: tuple[int, ...], seeds: int, seed: int, self_loops: bool) -> BatchSize:
    """The sizes of a batch of ``seeds`` training rows drawn at random (keyed by ``seed``) from the
    whole store and sampled as training samples them (counted once per process)."""
    sampler = _EveryPartHere(store_dir, list(fanouts), self_loops)
    train = np.concatenate([np.flatnonzero(np.asarray(p.train_mask)) + p.start for p in sampler.parts])
    in_split = [np.count_nonzero(np.asarray(p.train_mask) | p.val_mask | p.test_mask) for p in sampler.parts]
    if train.size == 0:
        raise ValueError(f"the partition store {store_dir} has no training rows to sample")
    chosen = np.sort(np.random.default_rng(seed).choice(train, size=min(seeds, train.size), replace=False))
    sub, _ = sampler.sample(np.asarray(sampler.perm[chosen], dtype=np.int64), chosen, batch_key(seed, 0, 0))
    return BatchSize(
        seeds=int(chosen.size),
        nodes=sub.num_nodes,
        edges=sub.num_edges,
        train_rows=int(train.size),
        eval_rows=int(max(in_split)),
    )


def _part_bytes(meta: dict) -> float:
    """The largest part as a rank reads it over an epoch: CSR, features, labels, masks, and its rows'
    original ids (``StoreView.own_ids``)."""
    itemsize = np.dtype(meta["feature_dtype"]).itemsize
    rows = [int(hi) - int(lo) for lo, hi in meta["node_ranges"]]
    return max(
        n * (8 + 8 + 3 + 8 + int(meta["num_features"]) * itemsize) + 4 * int(e)
        for n, e in zip(rows, meta["part_num_edges"])
    )


def predict_sampled(cfg, dtype_bytes: int, world_size: int) -> RunMemory | None:
    """The run's predicted peak per rank, or None without a partition store (the whole-graph sampler
    holds the graph and a feature cache on every rank, and is not predicted)."""
    if cfg.partitions is None or cfg.model.reads_edges:
        return None
    s = cfg.sampled
    meta = read_meta(cfg.partitions)
    if int(meta["num_parts"]) != world_size:
        return None  # the run refuses the mismatch itself, with its own message
    batch = one_batch(cfg.partitions, tuple(s.fanouts), -(-s.batch_size // world_size), cfg.seed, cfg.adds_self_loops)
    features, classes = int(meta["num_features"]), int(meta["num_classes"])
    source = (
        f"store {cfg.partitions}: a batch of {batch.seeds:,} seeds per rank drawn from it, {batch.nodes:,} nodes "
        f"and {batch.edges:,} edges after deduplication"
    )
    memory = predict_subgraph(cfg, dtype_bytes, batch.nodes, batch.edges, features, classes, source, read_ahead=False)
    terms = dict(memory.terms)
    terms["own part (as read)"] = _part_bytes(meta) + 8 * int(meta["num_nodes"])  # and the mapped permutation
    terms["training ids"] = 32 * batch.train_rows  # original and relabelled, and their sort
    # evaluation keeps the outputs (fp32), labels and masks of its rows in a split, then joins them (a copy)
    terms["evaluation outputs"] = 2 * batch.eval_rows * (4 * classes + 8 + 3)
    prepared = batch.nodes * (features * FEATURE_BYTES[s.feature_dtype] + 8 + 8 + 3) + batch.edges * 4
    terms["batches prepared ahead"] = s.prefetch_depth * prepared
    return RunMemory(terms, world_size, "sampled", source)


def alternatives(cfg, predicted: RunMemory, world_size: int, limit_mb: float) -> list[str]:
    """What would fit: smaller batches (a batch's terms shrink with its seeds, about) or more ranks
    (the part shrinks)."""
    terms = predicted.terms
    fixed = terms["process floor"] + terms["optimizer states"] + terms["training ids"] + terms["evaluation outputs"]
    part = terms["own part (as read)"]
    batch = predicted.total_bytes - fixed - part
    out = []
    for divide in (2, 4, 8):
        scaled = (fixed + part + batch / divide) / MB
        if scaled <= limit_mb:
            out.append(f'"batch_size": {max(cfg.sampled.batch_size // divide, 1)}: about {scaled:,.0f} MB per rank')
            break
    for more in (2 * world_size, 4 * world_size):
        scaled = (fixed + batch + part * world_size / more) / MB
        if scaled <= limit_mb:
            out.append(f"{more} ranks (dsgraph partition --parts {more}): about {scaled:,.0f} MB per rank")
            break
    return out or ["smaller batches and more ranks"]
