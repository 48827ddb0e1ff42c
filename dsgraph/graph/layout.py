"""The two layouts of a dataset .npz that dsgraph reads, and the names of their arrays.

- dsgraph's own (the bundled ``cora.npz``): ``src``, ``dst`` (directed edges src -> dst), ``x``,
  ``y``, ``train_mask``, ``val_mask``, ``test_mask``.
- the published benchmark layout (Platonov et al.'s heterophilous graphs, yandex-research/
  heterophilous-graphs): ``edges`` [E, 2] with every undirected edge stored once (read as both
  directions), ``node_features``, ``node_labels``, ``train_masks``, ``val_masks``, ``test_masks``.

Masks are [N] (one split) or [S, N] (S fixed splits; a run picks one with its 'split' setting).
Edge features are optional in both: ``edge_attr`` [E, F_e] beside ``src``/``dst`` (row e for edge
src[e] -> dst[e]), or ``edge_features`` [E, F_e] beside ``edges`` (row e for both directions of
edge e).
``canonical`` maps dsgraph's names to the members of a file, so everything else reads one layout.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np

DSGRAPH = {
    "src": "src",
    "dst": "dst",
    "x": "x",
    "y": "y",
    "train_mask": "train_mask",
    "val_mask": "val_mask",
    "test_mask": "test_mask",
}
BENCHMARK = {
    "edges": "edges",
    "x": "node_features",
    "y": "node_labels",
    "train_mask": "train_masks",
    "val_mask": "val_masks",
    "test_mask": "test_masks",
}
EDGE_FEATURES = {"src": "edge_attr", "edges": "edge_features"}  # the optional edge feature member of each layout
NODE_ARRAYS = ("x", "y", "train_mask", "val_mask", "test_mask")
MASKS = ("train_mask", "val_mask", "test_mask")


def members(path: str) -> set[str]:
    """The array names stored in the .npz at ``path``."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such dataset file")
    try:
        with zipfile.ZipFile(path) as archive:
            return {os.path.splitext(name)[0] for name in archive.namelist()}
    except (OSError, zipfile.BadZipFile) as err:
        raise ValueError(f"{path}: not a readable .npz archive ({err})") from None


def canonical(path: str, names: set[str]) -> dict[str, str]:
    """dsgraph name -> member name of the file's layout; ValueError naming what is missing."""
    if "edges" in names and "src" not in names:
        layout = BENCHMARK
    else:
        layout = DSGRAPH
    missing = [member for member in layout.values() if member not in names]
    if missing:
        raise ValueError(
            f"{path}: missing array(s) {', '.join(missing)}; a dataset needs {', '.join(DSGRAPH.values())} "
            f"(or the benchmark layout {', '.join(BENCHMARK.values())})"
        )
    return dict(layout)  # a copy: callers may add the optional members


def edge_features_member(layout: dict[str, str], names: set[str]) -> str | None:
    """The member that holds the file's edge features in its ``layout`` (``canonical``), if any."""
    member = EDGE_FEATURES["edges" if "edges" in layout else "src"]
    return member if member in names else None


def undirected_pairs(path: str, edges: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Edges [lo, hi) of an ``edges`` [E, 2] array as (src, dst) int64, both directions of each."""
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise ValueError(f"{path}: array 'edges' must be [E, 2] (one undirected edge per row), got shape {edges.shape}")
    if not np.issubdtype(edges.dtype, np.integer):
        raise ValueError(f"{path}: array 'edges' must hold integer node ids, got {edges.dtype}")
    block = np.asarray(edges[lo:hi], dtype=np.int64)
    return np.concatenate([block[:, 0], block[:, 1]]), np.concatenate([block[:, 1], block[:, 0]])


def all_splits(path: str) -> dict[str, np.ndarray] | None:
    """The masks of a .npz whose masks are [S, N] (every split, dsgraph names), else None."""
    from dsgraph.graph.npz_map import open_arrays

    names = canonical(path, members(path))
    masks = open_arrays(path, [names[m] for m in MASKS])
    if all(masks[names[m]].ndim == 1 for m in MASKS):
        return None
    return {m: np.asarray(masks[names[m]], dtype=bool) for m in MASKS}


def edge_count(arrays: dict) -> int:
    """Directed edges a file holds (twice the rows of a benchmark ``edges`` array)."""
    return 2 * int(arrays["edges"].shape[0]) if "edges" in arrays else int(arrays["src"].shape[0])
