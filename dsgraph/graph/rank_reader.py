"""One rank's share of a dataset file, read without ever holding the whole graph.

The edge list (``src``, ``dst``) and the node arrays of a dataset ``.npz`` are memory-mapped
(``npz_map.py``); a rank streams the edges in chunks and keeps only the in-edges of its own rows,
and copies only its rows of the features, labels and masks. Host memory per rank is then about
(N + E) / P plus a few N-sized integer arrays (in-degrees, a permutation), not N + E.

The result is the same CSR block and node data that splitting the whole graph in memory gives
(``Graph.from_edges`` then ``with_self_loops`` then ``rows``): sources in file order within a row,
or sorted when self loops are added; every check of ``Graph.validate`` is made on the rows read.
Edge features, when the file has them and the caller asks, follow the rank's edges the same way.
"""

from __future__ import annotations

import numpy as np
import torch

from dsgraph.graph import encodings, layout
from dsgraph.graph.edges import destination_order
from dsgraph.graph.graph import Graph
from dsgraph.graph.label_checks import (
    SplitChoice,
    check_labels,
    check_overlap,
    check_targets,
    class_count,
    num_splits,
    select_split,
)
from dsgraph.graph.npz_map import open_arrays
from dsgraph.graph.rank_graph import Csr, EdgeData, NodeData

CHUNK_EDGES = 1 << 21  # edges per streaming step: ~50 MB of int64 temporaries


class DatasetFile:
    """A dataset .npz in either layout (``layout.py``), memory-mapped, its labels and the chosen
    split's masks checked (``label_checks.py``)."""

    def __init__(self, path: str, chunk_edges: int = CHUNK_EDGES, choice: SplitChoice = SplitChoice()):
        self.path, self.chunk_edges = path, chunk_edges
        members = layout.members(path)
        self.names = layout.canonical(path, members)  # dsgraph name -> member name
        edge_member = layout.edge_features_member(self.names, members)
        if edge_member is not None:
            self.names["edge_attr"] = edge_member
        self.stored = tuple(name for name in encodings.stored_arrays() if name in members)  # encodings the file holds
        self._counted: dict[str, np.ndarray] | None = None
        mapped = open_arrays(path, list(self.names.values()))
        self.arrays = {key: mapped[member] for key, member in self.names.items()}
        a = self.arrays
        if edge_member is not None:
            self._check_edge_attr()
        if "edges" in a:
            layout.undirected_pairs(path, a["edges"], 0, 0)  # checks shape and dtype
        else:
            self._check_src_dst()
        if a["x"].ndim != 2:
            raise ValueError(f"{path}: features '{self.names['x']}' must be 2-D [N, F], got shape {a['x'].shape}")
        if not (np.issubdtype(a["x"].dtype, np.integer) or np.issubdtype(a["x"].dtype, np.floating)):
            if a["x"].dtype != np.bool_:
                raise ValueError(f"{path}: features '{self.names['x']}' must be real numbers, got {a['x'].dtype}")
        if self.num_nodes == 0:
            raise ValueError(f"{path}: the graph is empty ('{self.names['x']}' has 0 rows)")
        if a["y"].ndim == 0 or a["y"].shape[0] != self.num_nodes:
            raise ValueError(
                f"{path}: array '{self.names['y']}' has {len(a['y']) if a['y'].ndim else 'no'} rows but the graph "
                f"has {self.num_nodes} nodes"
            )
        self.continuous = choice.continuous
        self.multilabel = check_labels(path, self.names["y"], a["y"], self.continuous)
        self.splits = num_splits(a["train_mask"])
        for name in layout.MASKS:
            a[name] = select_split(path, self.names[name], a[name], self.num_nodes, choice.split)
        check_overlap(path, {k: a[k] for k in layout.MASKS}, self.names, choice.allow_overlap)
        if self.continuous:
            check_targets(path, self.names["y"], a["y"], {self.names[k]: a[k] for k in layout.MASKS})
        self.classes = (
            None
            if self.continuous or self.multilabel
            else class_count(path, self.names["y"], a["y"], choice.num_classes)
        )

    def _check_src_dst(self) -> None:
        a, path = self.arrays, self.path
        if a["src"].ndim != 1 or a["dst"].ndim != 1:
            raise ValueError(f"{path}: 'src' and 'dst' must be 1-D arrays")
        if a["src"].shape != a["dst"].shape:
            raise ValueError(f"{path}: 'src' has {a['src'].size} entries but 'dst' has {a['dst'].size}")
        for name in ("src", "dst"):
            if not np.issubdtype(a[name].dtype, np.integer):
                raise ValueError(f"{path}: '{name}' must hold integer node ids, got {a[name].dtype}")

    def _check_edge_attr(self) -> None:
        a, member = self.arrays["edge_attr"], self.names["edge_attr"]
        rows = a.shape[0] if a.ndim else -1
        stored = self.arrays["edges"].shape[0] if "edges" in self.arrays else self.arrays["src"].shape[0]
        if a.ndim not in (1, 2) or rows != stored:
            raise ValueError(
                f"{self.path}: edge features '{member}' must be [E, F_e] with E = {stored} rows (one per stored edge), "
                f"got shape {a.shape}"
            )
        if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
            raise ValueError(f"{self.path}: edge features '{member}' must be numeric, got {a.dtype}")

    @property
    def has_edge_features(self) -> bool:
        return "edge_attr" in self.arrays

    @property
    def num_edge_features(self) -> int:
        a = self.arrays.get("edge_attr")
        return 0 if a is None else (1 if a.ndim == 1 else int(a.shape[1]))

    def require_edge_features(self) -> None:
        """ValueError unless the file has edge features (a model that reads them was configured)."""
        if not self.has_edge_features:
            wanted = layout.EDGE_FEATURES["edges" if "edges" in self.arrays else "src"]
            raise ValueError(
                f"{self.path}: the model reads edge features (model.edge_features), but the file has no '{wanted}' "
                f'array; add one, or set model.edge_features to "none"'
            )

    @property
    def num_nodes(self) -> int:
        return int(self.arrays["x"].shape[0])

    @property
    def num_features(self) -> int:
        return int(self.arrays["x"].shape[1])

    @property
    def num_stored_edges(self) -> int:
        """Edges (or undirected pairs, in the benchmark layout) as the file stores them."""
        return int(self.arrays["edges"].shape[0] if "edges" in self.arrays else self.arrays["src"].shape[0])

    def chunks(self, edge_features: bool = False):
        """(first edge, src int64, dst int64, edge features float32 [e, F_e] or None) of consecutive
        edge chunks, range-checked (the features only with ``edge_features``, checked finite)."""
        a, n = self.arrays, self.num_nodes
        pairs = "edges" in a
        total = a["edges"].shape[0] if pairs else a["src"].shape[0]
        for lo in range(0, total, self.chunk_edges):
            hi = lo + self.chunk_edges
            attr = self._edge_attr(lo, hi, pairs) if edge_features else None
            if pairs:  # each stored edge read in both directions
                s, d = layout.undirected_pairs(self.path, a["edges"], lo, hi)
                checks = (("edges", s[: s.size // 2]), ("edges", d[: d.size // 2]))
            else:
                s, d = np.asarray(a["src"][lo:hi], np.int64), np.asarray(a["dst"][lo:hi], np.int64)
                checks = (("src", s), ("dst", d))
            for name, ids in checks:
                bad = np.flatnonzero((ids < 0) | (ids >= n))
                if bad.size:
                    raise ValueError(
                        f"{self.path}: edge index out of range in '{name}' at position {lo + bad[0]}: "
                        f"{int(ids[bad[0]])} is not in [0, {n})"
                    )
            yield lo, s, d, attr

    def _edge_attr(self, lo: int, hi: int, pairs: bool) -> np.ndarray:
        """float32 [e, F_e] features of stored edges [lo, hi), twice for the benchmark layout's pairs."""
        self.require_edge_features()
        block = np.ascontiguousarray(self.arrays["edge_attr"][lo:hi], dtype=np.float32).reshape(
            -1, self.num_edge_features
        )
        bad = np.flatnonzero(~np.isfinite(block).all(axis=1))
        if bad.size:
            raise ValueError(
                f"{self.path}: edge features '{self.names['edge_attr']}' contain NaN or Inf (first at edge "
                f"{lo + bad[0]})"
            )
        return np.concatenate([block, block]) if pairs else block

    def in_degrees(self, self_loops: bool) -> np.ndarray:
        """int64 [N]: in-edges of every row, with the self loop the model adds counted."""
        degree = np.zeros(self.num_nodes, dtype=np.int64)
        has_loop = np.zeros(self.num_nodes, dtype=bool)
        for _, s, d, _ in self.chunks():
            degree += np.bincount(d, minlength=self.num_nodes)
            has_loop[d[s == d]] = True
        return degree + ~has_loop if self_loops else degree

    def counted(self) -> dict[str, np.ndarray]:
        """The counted encodings (in- and out-degrees, ...) over the file's edges, by array name
        (computed once)."""
        if self._counted is None:
            self._counted = encodings.counted(((s, d) for _, s, d, _ in self.chunks()), self.num_nodes)
        return self._counted

    def encoding(self, name: str) -> np.ndarray:
        """The stored encoding ``name`` (memory-mapped), its shape checked: float [N, w], with the
        same w for every array of its encoding (LapPE's vectors and values)."""
        if name not in self.stored:
            raise ValueError(f"{self.path}: no '{name}' array; compute it with `dsgraph encode`")
        array = open_arrays(self.path, [name])[name]
        if array.ndim != 2 or array.shape[0] != self.num_nodes or not np.issubdtype(array.dtype, np.floating):
            raise ValueError(
                f"{self.path}: array '{name}' must be float [N={self.num_nodes}, width], got {array.dtype} "
                f"{array.shape}; recompute it with `dsgraph encode`"
            )
        siblings = encodings.spec_of_array(name).arrays
        if len(siblings) > 1 and set(siblings) <= set(self.stored):
            shapes = {sibling: a.shape for sibling, a in open_arrays(self.path, list(siblings)).items()}
            if len(set(shapes.values())) > 1:
                listed = " and ".join(f"'{sibling}' {shape}" for sibling, shape in shapes.items())
                raise ValueError(f"{self.path}: {listed} differ in shape; recompute them with `dsgraph encode`")
        return array

    def node_encodings(self, ids: np.ndarray, arrays) -> dict[str, torch.Tensor]:
        """Copies of the encoding ``arrays`` of rows ``ids`` (counted ones over the file's edges)."""
        out = {}
        for name in arrays:
            stored = encodings.spec_of_array(name).stored
            rows = np.asarray(self.encoding(name)[ids]) if stored else self.counted()[name][ids]
            encodings.check_values(self.path, name, rows)
            out[name] = rows
        return encodings.as_tensors(out)

    def num_classes(self) -> int:
        y = self.arrays["y"]
        if self.multilabel or (self.continuous and y.ndim == 2):
            return int(y.shape[1])
        if self.continuous:
            return 1
        return self.classes

    def rows(self, start: int, end: int, self_loops: bool, perm: np.ndarray | None = None) -> Csr:
        """The CSR block of rows [start, end) with global source ids. With ``perm`` (new id -> old
        id of a relabelling, int64 [N]) the rows and the sources are the relabelled ones."""
        return self.rows_and_edges(start, end, self_loops, perm)[0]

    def rows_and_edges(
        self, start: int, end: int, self_loops: bool, perm: np.ndarray | None = None, edge_features: bool = False
    ) -> tuple[Csr, EdgeData | None]:
        """``rows``, and with ``edge_features`` the features of the block's edges in its order."""
        inverse = None
        if perm is not None:
            inverse = np.empty_like(perm)
            inverse[perm] = np.arange(perm.size)
        old_rows = np.arange(start, end) if perm is None else perm[start:end]
        kept_src, kept_dst, kept_attr = [], [], []  # sources in old ids, rows local to the block
        for _, s, d, attr in self.chunks(edge_features):
            d = d if inverse is None else inverse[d]
            mine = (d >= start) & (d < end)
            kept_src.append(s[mine])
            kept_dst.append(d[mine] - start)
            kept_attr.append(attr[mine] if edge_features else None)
        src, dst = np.concatenate(kept_src), np.concatenate(kept_dst)
        attr = np.concatenate(kept_attr).reshape(-1, self.num_edge_features) if edge_features else None
        n, stored = end - start, src.size
        if self_loops:  # a loop for every row without one; rows sorted by (old) source, as with_self_loops does
            has_loop = np.zeros(n, dtype=bool)
            has_loop[dst[src == old_rows[dst]]] = True
            missing = np.flatnonzero(~has_loop)
            src, dst = np.concatenate([src, old_rows[missing]]), np.concatenate([dst, missing])
            order = destination_order(dst, src, self.num_nodes)
        else:
            order = np.argsort(dst, kind="stable")
        col = src[order] if inverse is None else inverse[src[order]]
        rowptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=rowptr[1:])
        csr = Csr(torch.from_numpy(rowptr), torch.from_numpy(col.astype(np.int32)))
        if not edge_features:
            return csr, None
        attr = np.concatenate([attr, np.zeros((src.size - stored, attr.shape[1]), np.float32)])[order]
        added = (np.arange(src.size) >= stored)[order]  # the loops appended above
        return csr, EdgeData(attr=torch.from_numpy(attr), added_loop=torch.from_numpy(added))

    def _labels(self, ids: np.ndarray) -> np.ndarray:
        """int64 class ids [n], float32 [n, T] multi-label targets with NaN for missing labels, or a
        continuous target float32 [n] or [n, T] as stored."""
        y = np.asarray(self.arrays["y"][ids])
        if self.continuous:
            return y.astype(np.float32)
        if self.multilabel:
            y = y.astype(np.float32)
            y[y == -1] = np.nan
            return y
        y = y.astype(np.int64)
        if y.size and int(y.min()) < -1:
            raise ValueError(f"{self.path}: labels '{self.names['y']}' must be class ids >= 0 (or -1 for unlabelled)")
        return y

    def graph(self, name: str) -> Graph:
        """The whole dataset in memory (``load_npz``), read the way a rank reads its rows, with the
        file's edge features, if it has them, and every encoding the file stores."""
        chunks = list(self.chunks(self.has_edge_features))
        src = np.concatenate([s for _, s, _, _ in chunks]) if chunks else np.zeros(0, np.int64)
        dst = np.concatenate([d for _, _, d, _ in chunks]) if chunks else np.zeros(0, np.int64)
        attr = None
        if self.has_edge_features:
            attr = (
                np.concatenate([a for _, _, _, a in chunks])
                if chunks
                else np.zeros((0, self.num_edge_features), np.float32)
            )
        ids = np.arange(self.num_nodes)
        nodes = self.node_data(ids, ids)
        graph = Graph.from_edges(
            src,
            dst,
            x=nodes.x.numpy(),
            y=nodes.y.numpy(),
            train_mask=nodes.train_mask.numpy(),
            val_mask=nodes.val_mask.numpy(),
            test_mask=nodes.test_mask.numpy(),
            num_nodes=self.num_nodes,
            name=name,
            source=self.path,
            edge_attr=attr,
            continuous=self.continuous,
        )
        graph.enc.update(self.node_encodings(ids, self.stored))  # the counted ones came with the edges
        return graph

    def structure(self, self_loops: bool) -> Graph:
        """The whole graph's structure as a Graph without node data (x is [N, 0]): for partitioning."""
        csr = self.rows(0, self.num_nodes, self_loops)
        n, none = self.num_nodes, torch.zeros(self.num_nodes, dtype=torch.bool)
        return Graph(
            rowptr=csr.rowptr,
            col=csr.col,
            x=torch.zeros(n, 0),
            y=torch.zeros(n, dtype=torch.int64),
            train_mask=none,
            val_mask=none,
            test_mask=none,
            name=self.path,
        )

    def node_data(self, ids: np.ndarray, node_ids: np.ndarray, arrays: tuple[str, ...] = ()) -> NodeData:
        """Copies of the features, labels, masks and the encoding ``arrays`` of rows ``ids``
        (dataset ids, ascending or not), checked as Graph.validate checks them; ``node_ids`` are
        what the model is told."""
        a, path = self.arrays, self.path
        x = np.ascontiguousarray(a["x"][ids], dtype=np.float32)
        bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
        if bad.size:
            raise ValueError(f"{path}: features 'x' contain NaN or Inf (first at node {int(ids[bad[0]])})")
        y = self._labels(ids)
        masks = {name: np.asarray(a[name][ids]).astype(bool) for name in layout.MASKS}
        for name, mask in masks.items():
            if not (self.multilabel or self.continuous) and (mask & (y < 0)).any():
                raise ValueError(f"{path}: '{self.names[name]}' selects a node whose label is -1 (unlabelled)")
        t = torch.from_numpy
        return NodeData(
            node_ids=t(np.asarray(node_ids, dtype=np.int64)),
            x=t(x),
            y=t(y),
            **{k: t(v) for k, v in masks.items()},
            enc=self.node_encodings(ids, arrays),
        )
