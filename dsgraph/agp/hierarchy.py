"""Row splits that know the nodes: which part of each rank's halo comes from another node.

GP-Halo's traffic across the slow tier is the halo its rows read from ranks on other nodes. Two
ways to know it:

- ``node_then_rank_split``: a graph at hand is partitioned the way a multi-node job should place it,
  into n node parts first (METIS minimises the cut between nodes), then each node part into its g
  ranks (METIS on the node part's induced subgraph); the split is measured exactly
  (``partition_quality``) plus, per part, the distinct remote sources on other nodes;
- ``estimated_node_split``: a graph known by its sizes only gets an even split with an assumed
  halo fraction, and the cross-node share of that halo is an estimate, stated in ``source``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsgraph.parallel.shapes import GraphShape, SplitShape


@dataclass(frozen=True, slots=True)
class NodeSplitShape(SplitShape):
    """A ``SplitShape`` over n nodes of ``ranks_per_node`` consecutive parts each."""

    ranks_per_node: int
    inter_halo_sizes: list[int]
    """Per part: the distinct remote sources its rows read that live on another node."""
    node_halo_sizes: list[int]
    """Per node: the distinct sources on other nodes that its rows read (the union over its ranks)."""
    source: str
    """How the split was obtained: measured on a partition, or the estimate used."""


def node_then_rank_parts(graph, nodes: int, ranks_per_node: int, method: str = "metis", seed: int = 0) -> np.ndarray:
    """Part id (node * ranks_per_node + local rank) of every node of ``graph``: ``method`` into
    ``nodes`` parts, then each of them, as its induced subgraph, into ``ranks_per_node`` parts."""
    import torch

    from dsgraph.graph.graph import Graph
    from dsgraph.graph.partition import partition_nodes, relabel

    node_of = partition_nodes(graph, nodes, method, seed=seed, metis_balance="edges")
    relabelled, perm, ranges = relabel(graph, node_of, nodes)
    rowptr, col = relabelled.rowptr.numpy(), relabelled.col.numpy()
    parts = np.empty(graph.num_nodes, dtype=np.int64)
    for k, (start, end) in enumerate(ranges.tolist()):
        block = col[rowptr[start] : rowptr[end]].astype(np.int64)
        row = np.repeat(np.arange(end - start), np.diff(rowptr[start : end + 1]))
        inside = (block >= start) & (block < end)
        m = end - start
        counts = np.bincount(row[inside], minlength=m)
        sub_rowptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(counts, out=sub_rowptr[1:])
        sub = Graph(
            rowptr=torch.from_numpy(sub_rowptr),
            col=torch.from_numpy((block[inside] - start).astype(np.int32)),
            x=torch.zeros(m, 1),
            y=torch.zeros(m, dtype=torch.int64),
            train_mask=torch.zeros(m, dtype=torch.bool),
            val_mask=torch.zeros(m, dtype=torch.bool),
            test_mask=torch.zeros(m, dtype=torch.bool),
        )
        local = (
            partition_nodes(sub, min(ranks_per_node, max(m, 1)), method, seed=seed, metis_balance="edges")
            if m
            else np.zeros(0, np.int64)
        )
        parts[perm[start:end]] = k * ranks_per_node + local
    return parts


def node_then_rank_split(graph, p: int, ranks_per_node: int, method: str = "metis", seed: int = 0) -> NodeSplitShape:
    """The measured split of ``graph`` into p = n x g parts, node parts first (``node_then_rank_parts``)."""
    from dsgraph.graph.partition import partition_quality, relabel

    g = ranks_per_node
    if p % g:
        raise ValueError(f"a node-then-rank split needs whole nodes: {p} ranks do not divide into nodes of {g}")
    parts = node_then_rank_parts(graph, p // g, g, method, seed)
    relabelled, _, ranges = relabel(graph, parts, p)
    q = partition_quality(relabelled, ranges)
    rowptr, col = relabelled.rowptr.numpy(), relabelled.col.numpy()

    def remote(start: int, end: int, node_start: int, node_end: int) -> np.ndarray:
        block = col[rowptr[start] : rowptr[end]]
        return np.unique(block[(block < node_start) | (block >= node_end)])

    inter, nodes = [], []
    for node in range(p // g):
        node_start, node_end = int(ranges[node * g, 0]), int(ranges[node * g + g - 1, 1])
        inter += [
            int(remote(int(ranges[r, 0]), int(ranges[r, 1]), node_start, node_end).size)
            for r in range(node * g, node * g + g)
        ]
        nodes.append(int(remote(node_start, node_end, node_start, node_end).size))
    return NodeSplitShape(
        list(q.part_nodes),
        list(q.part_edges),
        list(q.halo_sizes),
        list(q.send_sizes),
        g,
        inter,
        nodes,
        f"measured: {method} into {p // g} node parts, then each into {g} ranks",
    )


def estimated_node_split(
    num_nodes: int,
    num_edges: int,
    p: int,
    ranks_per_node: int,
    halo_fraction: float,
    node_halo_fraction: float | None = None,
    cross_node_share: float | None = None,
) -> NodeSplitShape:
    """Even parts whose halo is ``halo_fraction`` of the remote nodes (``SplitShape.even``), with
    estimates of what lies on other nodes:

    - a rank's cross-node halo: ``cross_node_share`` of its halo; None: the remote rows spread evenly
      over the other ranks, (P - g) / (P - 1) of it (no locality between nodes: an upper bound for a
      node-then-rank partition);
    - a node's halo (the union over its ranks, for the a2a|halo placement): ``node_halo_fraction`` of
      the nodes on other nodes; None: the union of g independent reads of the rank's cross-node halo."""
    g = ranks_per_node
    n = p // g
    even = SplitShape.even(num_nodes, num_edges, p, halo_fraction)
    others = num_nodes - num_nodes / n  # graph nodes on other nodes
    share = (p - g) / (p - 1) if cross_node_share is None else cross_node_share
    if not 0.0 <= share <= 1.0 or not 0.0 <= (node_halo_fraction or 0.0) <= 1.0:
        raise ValueError(
            f"cross-node share and node halo fraction must be in [0, 1], got {cross_node_share}, {node_halo_fraction}"
        )
    inter = [round(h * share) for h in even.halo_sizes]
    node_halo = (
        others * (1 - (1 - max(inter) / others) ** g) if node_halo_fraction is None else node_halo_fraction * others
    )
    source = (
        f"estimate from the graph's size: halo {halo_fraction:g} of the remote nodes per rank, "
        + (
            f"{p - g}/{p - 1} of it on other nodes (spread evenly over the other ranks: an upper bound for a "
            "node-then-rank "
            "partition)"
            if cross_node_share is None
            else f"{cross_node_share:g} of it on other nodes (--cross-node-share)"
        )
        + ("" if node_halo_fraction is None else f"; a node's halo {node_halo_fraction:g} of the nodes on other nodes")
    )
    return NodeSplitShape(
        even.part_nodes, even.part_edges, even.halo_sizes, even.send_sizes, g, inter, [round(node_halo)] * n, source
    )


def add_node_splits(
    shape: GraphShape,
    rank_counts,
    ranks_per_node: int,
    *,
    graph=None,
    method: str = "metis",
    halo_fraction: float | None = None,
    node_halo_fraction: float | None = None,
    cross_node_share: float | None = None,
    seed: int = 0,
) -> list[str]:
    """Replaces ``shape.partitions[p]`` for every p in ``rank_counts`` that spans nodes by a split that
    knows its cross-node halo: measured on ``graph`` when given, else estimated (needs
    ``halo_fraction``). Returns one line per p saying which."""
    notes = []
    for p in rank_counts:
        if p <= ranks_per_node or p % ranks_per_node:
            continue
        if graph is not None:
            if p > graph.num_nodes:
                continue
            split = node_then_rank_split(graph, p, ranks_per_node, method, seed)
        elif halo_fraction is not None:
            split = estimated_node_split(
                shape.num_nodes, shape.num_edges, p, ranks_per_node, halo_fraction, node_halo_fraction, cross_node_share
            )
        else:
            continue
        shape.partitions[p] = split
        notes.append(
            f"p={p}: halo across nodes {max(split.inter_halo_sizes):,} of {max(split.halo_sizes):,} rows (busiest "
            f"rank); {split.source}"
        )
    return notes
