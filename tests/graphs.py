"""Small graphs for tests: uneven node counts, rows with no in-edges, a hub row."""

from __future__ import annotations

import numpy as np

from dsgraph.graph import Graph


def random_graph(
    num_nodes: int = 103,
    num_edges: int = 600,
    num_features: int = 12,
    num_classes: int = 5,
    seed: int = 0,
    edge_features: int = 0,
) -> Graph:
    """A directed random graph where nodes 0, 7 and the last node have no in-edges and node 5 is a hub;
    ``edge_features``: that many standard normal features per edge (edge_attr)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_nodes, num_edges)
    dst = rng.integers(0, num_nodes, num_edges)
    dst[:40] = 5  # a hub row
    empty = np.isin(dst, [0, 7, num_nodes - 1])
    src, dst = src[~empty], dst[~empty]
    key = np.unique(src * num_nodes + dst)
    src, dst = key // num_nodes, key % num_nodes
    y = rng.integers(0, num_classes, num_nodes)
    split = rng.random(num_nodes)
    edge_attr = rng.standard_normal((src.size, edge_features)).astype(np.float32) if edge_features else None
    return Graph.from_edges(
        src,
        dst,
        x=rng.standard_normal((num_nodes, num_features)).astype(np.float32),
        y=y,
        train_mask=split < 0.5,
        val_mask=(split >= 0.5) & (split < 0.75),
        test_mask=split >= 0.75,
        num_nodes=num_nodes,
        name="random",
        edge_attr=edge_attr,
    )
