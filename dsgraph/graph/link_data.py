"""A link-prediction dataset read from its ``.npz``: node features and a ``LinkSplit``.

The file holds ``x`` (or ``node_features``) [N, F] and either fixed splits (``train_edges``,
``val_edges``, ``test_edges`` [m, 2], with optional ``val_neg_edges``/``test_neg_edges`` [k, 2] or
``val_neg_dst``/``test_neg_dst`` [m, K]; see ``link_split.py``) or a graph (``src``/``dst``, or
``edges`` [E, 2]) that ``random_split`` splits with the run's seed. Labels and node masks are not
needed and are ignored. The encoder's graph (``message_graph``) holds the training pairs only.
"""

from __future__ import annotations

import os

import numpy as np

from dsgraph.graph.graph import Graph
from dsgraph.graph.layout import members
from dsgraph.graph.link_split import SPLITS, LinkSplit, random_split, undirected_pairs, with_negatives
from dsgraph.graph.npz_map import open_arrays

FIXED = tuple(f"{s}_edges" for s in SPLITS)


def _pairs(path: str, name: str, array) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != 2 or array.shape[1] != 2:
        raise ValueError(f"{path}: array '{name}' must be [m, 2] node id pairs, got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{path}: array '{name}' must hold integer node ids, got {array.dtype}")
    return array.astype(np.int64)


def _given_negatives(path: str, names: set[str], positives: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """(negatives, per_positive) of the held-out splits that the file fixes."""
    negatives, per_positive = {}, {}
    for split in ("val", "test"):
        shared, own = f"{split}_neg_edges", f"{split}_neg_dst"
        if shared in names and own in names:
            raise ValueError(f"{path}: holds both '{shared}' and '{own}'; keep one kind of {split} negatives")
        if shared in names:
            negatives[split] = _pairs(path, shared, open_arrays(path, [shared])[shared])
        elif own in names:
            dst = np.asarray(open_arrays(path, [own])[own])
            pos = positives[split]
            if dst.ndim != 2 or dst.shape[0] != pos.shape[0] or not np.issubdtype(dst.dtype, np.integer):
                raise ValueError(
                    f"{path}: array '{own}' must be integer [m, K] with one row per '{split}_edges' pair "
                    f"({pos.shape[0]}), got {dst.dtype} {dst.shape}"
                )
            k = dst.shape[1]
            negatives[split] = np.stack([np.repeat(pos[:, 0], k), dst.reshape(-1).astype(np.int64)], axis=1)
            per_positive[split] = k
    return negatives, per_positive


def load_link_split(path: str, *, val_fraction: float, test_fraction: float, seed: int) -> tuple[np.ndarray, LinkSplit]:
    """(x [N, F] as stored, the checked split) of the dataset at ``path``."""
    names = members(path)
    feature = "x" if "x" in names else "node_features" if "node_features" in names else None
    if feature is None:
        raise ValueError(f"{path}: a link-prediction dataset needs node features 'x' (or 'node_features') [N, F]")
    x = open_arrays(path, [feature])[feature]
    if x.ndim != 2:
        raise ValueError(f"{path}: features '{feature}' must be 2-D [N, F], got shape {x.shape}")
    n = int(x.shape[0])
    if any(name in names for name in FIXED):
        missing = [name for name in FIXED if name not in names]
        if missing:
            raise ValueError(f"{path}: fixed link splits need {', '.join(FIXED)}; missing {', '.join(missing)}")
        arrays = open_arrays(path, list(FIXED))
        positives = {s: _pairs(path, f"{s}_edges", arrays[f"{s}_edges"]) for s in SPLITS}
        for s in SPLITS:
            if positives[s].size and (positives[s].min() < 0 or positives[s].max() >= n):
                raise ValueError(f"{path}: array '{s}_edges' names a node outside [0, {n})")
        given, per_positive = _given_negatives(path, names, positives)
        split = with_negatives(n, positives, given, seed, per_positive)
    else:
        src, dst = _edge_list(path, names)
        split = random_split(undirected_pairs(src, dst, n), n, val_fraction, test_fraction, seed)
    split.check(path)
    return x, split


def _edge_list(path: str, names: set[str]) -> tuple[np.ndarray, np.ndarray]:
    if "src" in names and "dst" in names:
        arrays = open_arrays(path, ["src", "dst"])
        src, dst = np.asarray(arrays["src"]), np.asarray(arrays["dst"])
        if src.shape != dst.shape or src.ndim != 1:
            raise ValueError(f"{path}: 'src' and 'dst' must be 1-D arrays of one length")
    elif "edges" in names:
        edges = _pairs(path, "edges", open_arrays(path, ["edges"])["edges"])
        src, dst = edges[:, 0], edges[:, 1]
    else:
        raise ValueError(
            f"{path}: a link-prediction dataset needs edges: 'src' and 'dst', 'edges' [E, 2], or fixed "
            f"splits {', '.join(FIXED)}"
        )
    if not (np.issubdtype(src.dtype, np.integer) and np.issubdtype(dst.dtype, np.integer)):
        raise ValueError(f"{path}: edges must hold integer node ids")
    return src.astype(np.int64), dst.astype(np.int64)


def message_graph(x: np.ndarray, split: LinkSplit, source: str) -> Graph:
    """The graph the encoder reads: the training pairs in both directions. Node masks mark the
    endpoints of each split's positives (the loaders' statistics); labels are unused zeros."""
    n = split.num_nodes
    src, dst = split.message_edges()
    masks = {}
    for name in SPLITS:
        mask = np.zeros(n, dtype=bool)
        mask[split.positives[name].reshape(-1)] = True
        masks[f"{name}_mask"] = mask
    return Graph.from_edges(
        src,
        dst,
        x=np.array(x, dtype=np.float32),
        y=np.zeros(n, dtype=np.int64),
        num_nodes=n,
        name=source,
        source=source,
        **masks,
    )


def edge_file(path: str) -> np.ndarray:
    """int64 [m, 2] pairs to score from a ``.npy`` [m, 2] or a ``.npz`` with 'edges' [m, 2] (or
    'src' and 'dst')."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such edge file")
    if path.endswith(".npy"):
        return _pairs(path, "the array", np.load(path, allow_pickle=False))
    if path.endswith(".npz"):
        names = members(path)
        if "edges" in names:
            return _pairs(path, "edges", open_arrays(path, ["edges"])["edges"])
        src, dst = _edge_list(path, names)
        return np.stack([src, dst], axis=1)
    raise ValueError(f"{path}: edges to score must be a .npy [m, 2] or a .npz with 'edges' [m, 2] (or 'src' and 'dst')")
