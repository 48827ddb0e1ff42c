"""One rank's share of a dataset file, read without ever holding the whole graph.

The edge list (``src``, ``dst``) and the node arrays of a dataset ``.npz`` are memory-mapped
(``npz_map.py``); a rank streams the edges in chunks and keeps only the in-edges of its own rows,
and copies only its rows of the features, labels and masks. Host memory per rank is then about
(N + E) / P plus a few N-sized integer arrays (in-degrees, a permutation), not N + E.

The result is the same CSR block and node data that splitting the whole graph in memory gives
(``Graph.from_edges`` then ``with_self_loops`` then ``rows``): sources in file order within a row,
or sorted when self loops are added; every check of ``Graph.validate`` is made on the rows read.
"""

from __future__ import annotations

import numpy as np
import torch

from dsgraph.graph.graph import Graph
from dsgraph.graph.npz import REQUIRED
from dsgraph.graph.npz_map import open_arrays
from dsgraph.graph.rank_graph import Csr, NodeData

CHUNK_EDGES = 1 << 21  # edges per streaming step: ~50 MB of int64 temporaries


class DatasetFile:
    """A dataset .npz (src, dst, x, y, train_mask, val_mask, test_mask), memory-mapped."""

    def __init__(self, path: str, chunk_edges: int = CHUNK_EDGES):
        self.path, self.chunk_edges = path, chunk_edges
        self.arrays = open_arrays(path, REQUIRED)
        a = self.arrays
        if a["src"].ndim != 1 or a["src"].shape != a["dst"].shape:
            raise ValueError(f"{path}: 'src' and 'dst' must be 1-D arrays of one length")
        for name in ("src", "dst"):
            if not np.issubdtype(a[name].dtype, np.integer):
                raise ValueError(f"{path}: '{name}' must hold integer node ids, got {a[name].dtype}")
        if a["x"].ndim != 2:
            raise ValueError(f"{path}: features 'x' must be 2-D [N, F], got shape {a['x'].shape}")
        for name in ("y", "train_mask", "val_mask", "test_mask"):
            if a[name].shape[0] != self.num_nodes:
                raise ValueError(f"{path}: array '{name}' has {a[name].shape[0]} rows but the graph has {self.num_nodes} nodes")

    @property
    def num_nodes(self) -> int:
        return int(self.arrays["x"].shape[0])

    @property
    def num_features(self) -> int:
        return int(self.arrays["x"].shape[1])

    def chunks(self):
        """(first edge, src int64, dst int64) of consecutive edge chunks, range-checked."""
        src, dst, n = self.arrays["src"], self.arrays["dst"], self.num_nodes
        for lo in range(0, src.shape[0], self.chunk_edges):
            s, d = np.asarray(src[lo : lo + self.chunk_edges], np.int64), np.asarray(dst[lo : lo + self.chunk_edges], np.int64)
            for name, ids in (("src", s), ("dst", d)):
                bad = np.flatnonzero((ids < 0) | (ids >= n))
                if bad.size:
                    raise ValueError(f"{self.path}: edge index out of range in '{name}' at position {lo + bad[0]}: "
                                     f"{int(ids[bad[0]])} is not in [0, {n})")  # fmt: skip
            yield lo, s, d

    def in_degrees(self, self_loops: bool) -> np.ndarray:
        """int64 [N]: in-edges of every row, with the self loop the model adds counted."""
        degree = np.zeros(self.num_nodes, dtype=np.int64)
        has_loop = np.zeros(self.num_nodes, dtype=bool)
        for _, s, d in self.chunks():
            degree += np.bincount(d, minlength=self.num_nodes)
            has_loop[d[s == d]] = True
        return degree + ~has_loop if self_loops else degree

    def num_classes(self) -> int:
        y = self.arrays["y"]
        return int(np.max(y)) + 1 if y.size else 0

    def rows(self, start: int, end: int, self_loops: bool, perm: np.ndarray | None = None) -> Csr:
        """The CSR block of rows [start, end) with global source ids. With ``perm`` (new id -> old
        id of a relabelling, int64 [N]) the rows and the sources are the relabelled ones."""
        inverse = None
        if perm is not None:
            inverse = np.empty_like(perm)
            inverse[perm] = np.arange(perm.size)
        old_rows = np.arange(start, end) if perm is None else perm[start:end]
        kept_src, kept_dst = [], []  # sources in old ids, rows local to the block
        for _, s, d in self.chunks():
            d = d if inverse is None else inverse[d]
            mine = (d >= start) & (d < end)
            kept_src.append(s[mine])
            kept_dst.append(d[mine] - start)
        src, dst = np.concatenate(kept_src), np.concatenate(kept_dst)
        n = end - start
        if self_loops:  # a loop for every row without one; rows sorted by (old) source, as with_self_loops does
            has_loop = np.zeros(n, dtype=bool)
            has_loop[dst[src == old_rows[dst]]] = True
            missing = np.flatnonzero(~has_loop)
            src, dst = np.concatenate([src, old_rows[missing]]), np.concatenate([dst, missing])
            order = np.lexsort((src, dst))
        else:
            order = np.argsort(dst, kind="stable")
        col = src[order] if inverse is None else inverse[src[order]]
        rowptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=rowptr[1:])
        return Csr(torch.from_numpy(rowptr), torch.from_numpy(col.astype(np.int32)))

    def structure(self, self_loops: bool) -> Graph:
        """The whole graph's structure as a Graph without node data (x is [N, 0]): for partitioning."""
        csr = self.rows(0, self.num_nodes, self_loops)
        n, none = self.num_nodes, torch.zeros(self.num_nodes, dtype=torch.bool)
        return Graph(rowptr=csr.rowptr, col=csr.col, x=torch.zeros(n, 0), y=torch.zeros(n, dtype=torch.int64),
                     train_mask=none, val_mask=none, test_mask=none, name=self.path)  # fmt: skip

    def node_data(self, ids: np.ndarray, node_ids: np.ndarray) -> NodeData:
        """Copies of the features, labels and masks of rows ``ids`` (dataset ids, ascending or not),
        checked as Graph.validate checks them; ``node_ids`` are what the model is told."""
        a, path = self.arrays, self.path
        x = np.ascontiguousarray(a["x"][ids], dtype=np.float32)
        bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
        if bad.size:
            raise ValueError(f"{path}: features 'x' contain NaN or Inf (first at node {int(ids[bad[0]])})")
        y = np.asarray(a["y"][ids]).astype(np.int64)
        if y.size and int(y.min()) < -1:
            raise ValueError(f"{path}: labels 'y' must be class ids >= 0 (or -1 for unlabelled)")
        masks = {name: np.asarray(a[name][ids]).astype(bool) for name in ("train_mask", "val_mask", "test_mask")}
        for name, mask in masks.items():
            if (mask & (y < 0)).any():
                raise ValueError(f"{path}: '{name}' selects a node whose label is -1 (unlabelled)")
        t = torch.from_numpy
        return NodeData(node_ids=t(np.asarray(node_ids, dtype=np.int64)), x=t(x), y=t(y), **{k: t(v) for k, v in masks.items()})
