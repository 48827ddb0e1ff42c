"""Where a rank's graph comes from: the whole dataset (optionally relabelled by an in-memory
partition), or its own part of a partition store (``--partitions DIR``).

Either way the result is a ``RankGraph``: the global row split, an object the strategies can read
this rank's CSR block from (global source ids of the relabelled graph), and the rank's node data.
Node ids handed to the model are the dataset's original ids, so dropout masks do not depend on the
partition or on the number of ranks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from dsgraph.comm import GraphParallelGroup, even_row_counts, row_starts
from dsgraph.comm.control import ControlPlane
from dsgraph.graph import Graph, load_dataset
from dsgraph.graph.partition import partition_nodes, relabel
from dsgraph.graph.store import load_part, load_permutation
from dsgraph.train.data import LocalNodes


@dataclass
class PartBlock:
    """This rank's rows [start, end) of a graph with ``num_nodes`` nodes: the part of the graph the
    strategies "ag" and "halo" read (``rows``). Other ranks' rows are not here."""

    num_nodes: int
    start: int
    end: int
    rowptr: torch.Tensor  # int64 [n+1], rebased to 0
    col: torch.Tensor  # int32 [e], global source ids

    def rows(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        if (start, end) != (self.start, self.end):
            raise ValueError(f"this rank holds rows [{self.start}, {self.end}) only, not [{start}, {end})")
        return self.rowptr, self.col


@dataclass
class RankGraph:
    counts: list[int]  # rows per rank
    graph: Graph | PartBlock  # what the strategy reads
    local: LocalNodes  # this rank's node data
    num_features: int
    num_classes: int


def block_with_self_loops(rowptr: np.ndarray, col: np.ndarray, start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Adds a self loop to every row of the block (rows are global ids start..start+n-1) that has
    none; each row's sources end up sorted, as ``Graph.with_self_loops`` leaves them."""
    n = rowptr.size - 1
    dst = np.repeat(np.arange(start, start + n, dtype=np.int64), np.diff(rowptr))
    src = np.asarray(col, dtype=np.int64)
    has_loop = np.zeros(n, dtype=bool)
    has_loop[dst[src == dst] - start] = True
    missing = np.flatnonzero(~has_loop) + start
    dst, src = np.concatenate([dst, missing]), np.concatenate([src, missing])
    order = np.lexsort((src, dst))
    new_rowptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst - start, minlength=n), out=new_rowptr[1:])
    return torch.from_numpy(new_rowptr), torch.from_numpy(src[order].astype(np.int32))


def raise_if_any_rank_failed(control: ControlPlane, error: Exception | None) -> None:
    """Collective: every rank learns whether any rank failed, so all stop together with the messages
    of every failed rank (instead of the healthy ones waiting in a collective)."""
    reports = control.allgather(None if error is None else (type(error).__name__, str(error)))
    failed = [(r, kind, msg) for r, rep in enumerate(reports) if rep is not None for kind, msg in [rep]]
    if not failed:
        return
    lines = "\n".join(f"  rank {r}: {msg}" for r, _, msg in failed)
    cls = FileNotFoundError if all(kind == "FileNotFoundError" for _, kind, _ in failed) else ValueError
    raise cls(f"loading the graph failed on {len(failed)} of {control.world_size} rank(s):\n{lines}")


def from_store(store_dir: str, pg: GraphParallelGroup, control: ControlPlane, self_loops: bool) -> RankGraph:
    """Memory-maps only this rank's part of the store (checked against META.json's sizes and sha256);
    the store must have exactly one part per rank."""
    error = None
    try:
        part = load_part(store_dir, pg.rank, pg.world_size)
        perm = load_permutation(store_dir)
    except (ValueError, FileNotFoundError) as err:
        error = err
    raise_if_any_rank_failed(control, error)
    meta = part.meta
    counts = [int(end) - int(start) for start, end in meta["node_ranges"]]
    rowptr, col = np.asarray(part.rowptr), np.asarray(part.col)
    if self_loops:
        block_rowptr, block_col = block_with_self_loops(rowptr, col, part.start)
    else:
        block_rowptr, block_col = torch.from_numpy(rowptr.copy()), torch.from_numpy(col.copy())
    graph = PartBlock(num_nodes=part.num_nodes, start=part.start, end=part.end, rowptr=block_rowptr, col=block_col)
    copy = lambda a: torch.from_numpy(np.array(a))  # noqa: E731 (writable tensors from read-only maps)
    local = LocalNodes(
        counts=counts,
        start=part.start,
        node_ids=copy(perm[part.start : part.end]).long(),
        x=copy(part.x).float(),
        y=copy(part.y),
        train_mask=copy(part.train_mask),
        val_mask=copy(part.val_mask),
        test_mask=copy(part.test_mask),
    )
    num_classes = meta.get("num_classes")
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"{os.path.join(store_dir, 'META.json')}: needs a positive integer 'num_classes'")
    return RankGraph(counts=counts, graph=graph, local=local, num_features=int(meta["num_features"]), num_classes=num_classes)


def from_dataset(
    dataset: str, seed: int, pg: GraphParallelGroup, control: ControlPlane, self_loops: bool, partition_method: str | None
) -> RankGraph:
    """Loads the whole dataset on every rank. With ``partition_method`` (strategy "halo"), rank 0
    partitions it, the part ids reach the others through the control plane, and every rank relabels
    the graph so each part is one contiguous row range; otherwise rows are split evenly in file order."""
    graph = load_dataset(dataset, seed=seed)
    num_classes = graph.num_classes
    if self_loops:
        graph = graph.with_self_loops()
    perm = None
    if partition_method is not None and pg.world_size > 1:
        parts = partition_nodes(graph, pg.world_size, partition_method, seed=seed) if pg.rank == 0 else None
        parts = control.bcast(parts, root=0)
        graph, perm, ranges = relabel(graph, parts, pg.world_size)
        counts = (ranges[:, 1] - ranges[:, 0]).tolist()
    else:
        counts = even_row_counts(graph.num_nodes, pg.world_size)
    local = LocalNodes.split(graph, pg, counts)
    if perm is not None:
        start = row_starts(counts)[pg.rank]
        local.node_ids = torch.from_numpy(perm[start : start + counts[pg.rank]])
    return RankGraph(counts=counts, graph=graph, local=local, num_features=graph.num_features, num_classes=num_classes)

