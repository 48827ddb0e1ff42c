"""Synthetic power-law graphs from the R-MAT generator (Graph500 parameters a=.57, b=.19, c=.19).

Labels are planted communities that the generator itself creates: R-MAT picks the quadrant of each
edge bit by bit, so the top bits of a vertex id define blocks with more edges inside than across
(the a and d quadrants keep both ends on the same side). Node features are a noisy class centroid,
so a model learns from features alone but does better by attending to neighbours. Vertex ids are
randomly permuted afterwards (as Graph500 does) so that degree does not follow id order.
Everything is a function of the seed.

``rmat:SCALE:EF:labels=T`` plants a multi-label task instead: the top ``LABEL_BITS`` bits of a
vertex id pick one of 16 blocks, each block has a random 0/1 pattern over the T labels, a node
takes its block's pattern with ``LABEL_NOISE`` of its entries flipped, ``LABEL_MISSING`` of its
entries are missing (NaN), and its features are a noisy centroid of its block.

``rmat:SCALE:EF:edge_types=T`` plants a task that only edge features can solve: every edge gets
one of T types (its ``edge_attr`` is the one-hot [E, T]), drawn as its destination's hidden
dominant type with probability ``TYPE_DOMINANCE`` and uniformly otherwise; a node's label is the
most frequent type of its in-edges (-1, unlabelled, for a node without in-edges or with a tie),
and node features are standard normal noise, the same distribution for every class.

``rmat:SCALE:EF:structural`` plants a graph unlike a citation graph: two classes at 80/20 (class 1:
the ``MINORITY_SHARE`` of vertex ids that come first, the densest corner of R-MAT's recursion, whose
edges stay among themselves more often than chance) and ``NUM_STRUCTURAL`` dense structural
features per node that carry no label directly (``structural_features``: log degrees, statistics
of the neighbours' degrees, reciprocity). The class shows in degrees only in part; a model does
better by looking at whom a node is linked to.

``rmat:SCALE[:EF]:regression`` plants a continuous target (task 'regression') on the default graph
and features: a fixed random direction w [NUM_FEATURES] (from the seed) scores every node,
s_i = <x_i, w> / sqrt(NUM_FEATURES), and the target is y_i = s_i + the mean of s_j over the
in-neighbours j of i (0 without in-neighbours), standardised to mean 0 and variance 1 over all
nodes (float32 [N]). Deterministic and noise-free: a node's features explain part of it, its
neighbourhood the rest, so attention over the in-edges is needed for R2 near 1 (``planted_target``).
"""

from __future__ import annotations

import numpy as np

from dsgraph.graph.graph import Graph

GENERATOR_VERSION = 1  # part of cached files' names (datasets.py): bump when the generated graph changes
A, B, C = 0.57, 0.19, 0.19
COMMUNITY_BITS = 2  # 4 classes
NUM_FEATURES = 64
FEATURE_SIGNAL = 0.6  # centroid scale relative to unit noise
LABEL_BITS = 4  # multi-label: 16 blocks of planted label patterns
LABEL_NOISE = 0.1
LABEL_MISSING = 0.1
TYPE_DOMINANCE = 0.5  # edge_types: chance that an in-edge has its destination's dominant type
OPTIONS = ("labels", "edge_types")  # the spec's optional last part: NAME=T
STRUCTURAL = "structural"  # or the last part 'structural': 'rmat:SCALE[:EF]:structural'
REGRESSION = "regression"  # or the last part 'regression': 'rmat:SCALE[:EF]:regression'
MINORITY_SHARE = 0.2  # structural: class 1's share of the nodes
NUM_STRUCTURAL = 7


def _option(spec: str, name: str) -> int:
    """T of the spec's last part ``NAME=T`` (0 when the spec has no such part)."""
    last = spec.split(":")[-1]
    if not last.startswith(f"{name}="):
        return 0
    try:
        value = int(last[len(name) + 1 :])
    except ValueError:
        raise ValueError(
            f"dataset '{spec}': expected {name}=T with an integer T, for example rmat:12:16:{name}=4"
        ) from None
    if not (1 if name == "labels" else 2) <= value <= 1024:
        raise ValueError(f"dataset '{spec}': need {1 if name == 'labels' else 2} <= T <= 1024 for {name}")
    return value


def rmat_labels(spec: str) -> int:
    """T of 'rmat:SCALE[:EF]:labels=T' (0: the single-label spec)."""
    return _option(spec, "labels")


def rmat_edge_types(spec: str) -> int:
    """T of 'rmat:SCALE[:EF]:edge_types=T' (0: no edge types)."""
    return _option(spec, "edge_types")


def rmat_structural(spec: str) -> bool:
    """Whether ``spec`` is 'rmat:SCALE[:EF]:structural' (two imbalanced classes, structural features)."""
    return spec.split(":")[-1] == STRUCTURAL


def rmat_regression(spec: str) -> bool:
    """Whether ``spec`` is 'rmat:SCALE[:EF]:regression' (a continuous target, ``planted_target``)."""
    return spec.split(":")[-1] == REGRESSION


def parse_rmat_spec(spec: str) -> tuple[int, int]:
    """``rmat:SCALE[:EDGE_FACTOR][:labels=T|:edge_types=T|:structural|:regression]`` -> (scale, edge_factor)."""
    parts = spec.split(":")
    if any(parts[-1].startswith(f"{name}=") for name in OPTIONS):
        rmat_labels(spec), rmat_edge_types(spec)
        parts = parts[:-1]
    elif parts[-1] in (STRUCTURAL, REGRESSION):
        parts = parts[:-1]
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


def planted_multilabel(block: np.ndarray, labels: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(y float32 [n, T] with NaN for missing labels, features [n, NUM_FEATURES]) from block ids."""
    blocks = 1 << LABEL_BITS
    pattern = rng.random((blocks, labels)) < 0.5
    y = pattern[block] ^ (rng.random((block.size, labels)) < LABEL_NOISE)
    y = y.astype(np.float32)
    y[rng.random(y.shape) < LABEL_MISSING] = np.nan
    centroids = rng.standard_normal((blocks, NUM_FEATURES), dtype=np.float32)
    x = FEATURE_SIGNAL * centroids[block] + rng.standard_normal((block.size, NUM_FEATURES), dtype=np.float32)
    return y, x


def planted_edge_types(dst: np.ndarray, n: int, types: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(one-hot edge features float32 [E, T], labels int64 [n]: the most frequent type of each
    node's in-edges, -1 without in-edges or on a tie), from hidden dominant types."""
    dominant = rng.integers(types, size=n)
    edge_type = np.where(rng.random(dst.size) < TYPE_DOMINANCE, dominant[dst], rng.integers(types, size=dst.size))
    counts = np.zeros((n, types), dtype=np.int64)
    np.add.at(counts, (dst, edge_type), 1)
    top = counts.max(axis=1)
    y = np.where((top > 0) & ((counts == top[:, None]).sum(axis=1) == 1), counts.argmax(axis=1), -1)
    return np.eye(types, dtype=np.float32)[edge_type], y.astype(np.int64)


def planted_target(x: np.ndarray, src: np.ndarray, dst: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """float32 [n]: the continuous target of 'rmat:...:regression' (module docstring) from the
    features [n, F] and the edges src -> dst."""
    n, f = x.shape
    w = rng.standard_normal(f)
    s = x.astype(np.float64) @ w / np.sqrt(f)
    degree = np.bincount(dst, minlength=n)
    y = s + np.bincount(dst, weights=s[src], minlength=n) / np.maximum(degree, 1)
    return ((y - y.mean()) / y.std()).astype(np.float32)


def structural_features(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """float32 [n, NUM_STRUCTURAL] of edges src -> dst: log(1 + in-degree), log(1 + out-degree), the
    mean and the max of log(1 + in-degree) over a node's in-neighbours, its mean over the
    out-neighbours, log(1 + the in-neighbours' summed in-degree) (the size of the 2-hop reach) and
    the reciprocity (the share of in-edges whose reverse edge exists). Unscaled, as a user's
    structural features usually come."""
    deg_in, deg_out = np.bincount(dst, minlength=n), np.bincount(src, minlength=n)
    log_in = np.log1p(deg_in)
    mean_in = np.bincount(dst, weights=log_in[src], minlength=n) / np.maximum(deg_in, 1)
    max_in = np.zeros(n)
    np.maximum.at(max_in, dst, log_in[src])
    mean_out = np.bincount(src, weights=log_in[dst], minlength=n) / np.maximum(deg_out, 1)
    reach = np.log1p(np.bincount(dst, weights=deg_in[src], minlength=n))
    keys = np.sort(src * n + dst)
    reverse = dst * n + src
    found = (
        keys[np.minimum(np.searchsorted(keys, reverse), keys.size - 1)] == reverse if keys.size else np.zeros(0, bool)
    )
    reciprocity = np.bincount(dst, weights=found, minlength=n) / np.maximum(deg_in, 1)
    return np.stack([log_in, np.log1p(deg_out), mean_in, max_in, mean_out, reach, reciprocity], axis=1).astype(
        np.float32
    )


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
    if rmat_labels(spec):
        if scale < LABEL_BITS:
            raise ValueError(f"dataset '{spec}': multi-label R-MAT needs SCALE >= {LABEL_BITS}")
        block = np.empty(n, dtype=np.int64)
        block[perm] = np.arange(n) >> (scale - LABEL_BITS)
        y, x = planted_multilabel(block, rmat_labels(spec), rng)
    edge_attr = None
    if rmat_edge_types(spec):
        edge_attr, y = planted_edge_types(dst, n, rmat_edge_types(spec), rng)
        x = rng.standard_normal((n, NUM_FEATURES), dtype=np.float32)  # the same for every class: no signal
    if rmat_structural(spec):
        y = np.zeros(n, dtype=np.int64)
        y[perm[: round(MINORITY_SHARE * n)]] = 1  # the first MINORITY_SHARE of the pre-permutation ids
        x = structural_features(src, dst, n)
    if rmat_regression(spec):
        y = planted_target(x, src, dst, rng)
    split = rng.random(n)
    labelled = y >= 0 if y.ndim == 1 and not rmat_regression(spec) else np.ones(n, dtype=bool)
    return Graph.from_edges(
        src,
        dst,
        x=x,
        y=y,
        train_mask=(split < 0.3) & labelled,
        val_mask=(split >= 0.3) & (split < 0.5) & labelled,
        test_mask=(split >= 0.5) & labelled,
        num_nodes=n,
        name=spec,
        source=spec,
        edge_attr=edge_attr,
        continuous=rmat_regression(spec),
    )
