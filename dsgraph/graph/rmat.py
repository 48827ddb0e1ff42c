"""Synthetic power-law graphs from the R-MAT generator (Graph500 parameters a=.57, b=.19, c=.19).

Labels are planted communities that the generator itself creates: R-MAT picks the quadrant of each
edge bit by bit, so the top bits of a vertex id define blocks with more edges inside than across
(the a and d quadrants keep both ends on the same side). Node features are a noisy class centroid,
so a model learns from features alone but does better by attending to neighbours. Vertex ids are
randomly permuted afterwards (as Graph500 does) so that degree does not follow id order.
Everything is a function of the seed.
"""

from __future__ import annotations

import numpy as np

from dsgraph.graph.graph import Graph

GENERATOR_VERSION = 1  # part of cached files' names (datasets.py): bump when the generated graph changes
A, B, C = 0.57, 0.19, 0.19
COMMUNITY_BITS = 2  # 4 classes
NUM_FEATURES = 64
FEATURE_SIGNAL = 0.6  # centroid scale relative to unit noise


def parse_rmat_spec(spec: str) -> tuple[int, int]:
    """'rmat:SCALE[:EDGE_FACTOR]' -> (scale, edge_factor)."""
    parts = spec.split(":")
    if parts[0] != "rmat" or len(parts) not in (2, 3):
        raise ValueError(f"dataset '{spec}': expected rmat:SCALE[:EDGE_FACTOR], for example rmat:12:16")
    try:
        scale = int(parts[1])
        edge_factor = int(parts[2]) if len(parts) == 3 else 16
    except ValueError:
        raise ValueError(f"dataset '{spec}': expected rmat:SCALE[:EDGE_FACTOR] with integers") from None
    if not COMMUNITY_BITS <= scale <= 30 or not 1 <= edge_factor <= 1024:
        raise ValueError(f"dataset '{spec}': need {COMMUNITY_BITS} <= SCALE <= 30 and 1 <= EDGE_FACTOR <= 1024")
    return scale, edge_factor


def rmat_edges(scale: int, edge_factor: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Raw R-MAT edges (before permutation), with self loops and duplicates removed."""
    num_edges = edge_factor << scale
    src = np.zeros(num_edges, dtype=np.int64)
    dst = np.zeros(num_edges, dtype=np.int64)
    for bit in range(scale - 1, -1, -1):
        r = rng.random(num_edges, dtype=np.float32)
        src_bit = r >= A + B  # quadrants c and d
        dst_bit = ((r >= A) & (r < A + B)) | (r >= A + B + C)  # quadrants b and d
        src |= src_bit.astype(np.int64) << bit
        dst |= dst_bit.astype(np.int64) << bit
    keep = src != dst
    key = np.unique(src[keep] << scale | dst[keep])
    return key >> scale, key & ((1 << scale) - 1)


def rmat_graph(spec: str, seed: int = 0) -> Graph:
    scale, edge_factor = parse_rmat_spec(spec)
    rng = np.random.default_rng(seed)
    n = 1 << scale
    src, dst = rmat_edges(scale, edge_factor, rng)
    labels = np.arange(n) >> (scale - COMMUNITY_BITS)  # planted communities, pre-permutation ids
    perm = rng.permutation(n)  # old id -> new id
    src, dst = perm[src], perm[dst]
    y = np.empty(n, dtype=np.int64)
    y[perm] = labels
    num_classes = 1 << COMMUNITY_BITS
    centroids = rng.standard_normal((num_classes, NUM_FEATURES), dtype=np.float32)
    x = FEATURE_SIGNAL * centroids[y] + rng.standard_normal((n, NUM_FEATURES), dtype=np.float32)
    split = rng.random(n)
    return Graph.from_edges(
        src,
        dst,
        x=x,
        y=y,
        train_mask=split < 0.3,
        val_mask=(split >= 0.3) & (split < 0.5),
        test_mask=split >= 0.5,
        num_nodes=n,
        name=spec,
        source=spec,
    )
