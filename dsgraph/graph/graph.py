"""The in-memory graph: CSR by destination, node features, labels and split masks.

Row i of the CSR lists the source nodes whose messages node i receives (its in-neighbours), which
is exactly the set of keys node i attends to. ``rowptr`` is int64 [N+1]; ``col`` is int32 [E] (node
ids must stay below 2^31).

Edge features ``edge_attr`` [E, F_e] (optional) are aligned with ``col``: row e describes edge e
of the CSR. Whatever reorders edges (the CSR build, self loops, partitioning) permutes them too.
Self loops that ``with_self_loops`` adds have no features of their own: their rows are zeros and
``added_loops`` marks them, so a model can give them a learned embedding instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from dsgraph.graph import encodings

MAX_NODES = 2**31 - 1


class CsrSizes:
    """``num_rows`` and ``num_edges`` of anything that holds a CSR as ``rowptr`` and ``col``."""

    __slots__ = ()

    @property
    def num_rows(self) -> int:
        return self.rowptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.col.numel()


@dataclass(kw_only=True)
class Graph(CsrSizes):
    rowptr: torch.Tensor  # int64 [N+1]
    col: torch.Tensor  # int32 [E], source node of each in-edge, sorted by destination
    x: torch.Tensor  # float32 [N, F]
    y: torch.Tensor  # int64 [N], -1 marks an unlabelled node; float32 [N, T] multi-label, NaN = missing; or a
    # continuous target (task 'regression'), float32 [N] or [N, T]
    train_mask: torch.Tensor  # bool [N]
    val_mask: torch.Tensor  # bool [N]
    test_mask: torch.Tensor  # bool [N]
    name: str = "graph"
    edge_attr: torch.Tensor | None = None  # float32 [E, F_e] in CSR edge order; None: no edge features
    added_loops: torch.Tensor | None = None  # bool [E]: self loops added by with_self_loops (edge_attr rows 0)
    enc: dict[str, torch.Tensor] = field(default_factory=dict)
    """Node encodings by array name (``encodings/``): 'degree' int64 [N, 2] of the edges the graph
    was built from, and what the dataset stores ('rwse' [N, K], 'lappe' and 'lappe_eigvals' [N, k])."""

    @property
    def num_nodes(self) -> int:
        return self.num_rows

    @property
    def num_features(self) -> int:
        return self.x.shape[1]

    @property
    def num_edge_features(self) -> int:
        """F_e of ``edge_attr`` (0 without edge features)."""
        return 0 if self.edge_attr is None else int(self.edge_attr.shape[1])

    def edge_range(self, start: int, end: int) -> tuple[int, int]:
        """The CSR positions [lo, hi) of the in-edges of rows [start, end)."""
        return int(self.rowptr[start]), int(self.rowptr[end])

    @property
    def multilabel(self) -> bool:
        return self.y.ndim == 2

    @property
    def num_classes(self) -> int:
        """Classes of a single-label task, labels T of a multi-label one, targets of a continuous one
        (1 for a float [N] target)."""
        if self.multilabel:
            return int(self.y.shape[1])
        if self.y.is_floating_point():
            return 1
        return int(self.y.max().item()) + 1 if self.num_nodes else 0

    @classmethod
    def from_edges(
        cls,
        src,
        dst,
        *,
        x,
        y,
        train_mask,
        val_mask,
        test_mask,
        num_nodes: int | None = None,
        name: str = "graph",
        source: str = "input",
        edge_attr=None,
        continuous: bool = False,
    ) -> Graph:
        """Builds the destination-sorted CSR from an edge list (src -> dst) and validates everything;
        ``enc`` holds the counted encodings of these edges (``encodings.counted``).

        ``edge_attr``: None or [E, F_e] numeric, row e the features of edge src[e] -> dst[e]; it is
        reordered with the edges. ``source`` names where the arrays came from; it prefixes every
        error message. ``continuous``: ``y`` is a continuous target (float32 [N] or [N, T], as given).
        """
        src = np.asarray(src)
        dst = np.asarray(dst)
        x = np.asarray(x)
        if num_nodes is None:
            num_nodes = x.shape[0] if x.ndim >= 1 else 0
        _check_edges(src, dst, num_nodes, source)
        order = np.argsort(dst, kind="stable")
        counts = np.bincount(dst, minlength=num_nodes) if dst.size else np.zeros(num_nodes, np.int64)
        rowptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(counts, out=rowptr[1:])
        graph = cls(
            rowptr=torch.from_numpy(rowptr),
            col=torch.from_numpy(src[order].astype(np.int32)),
            x=_as_features(x, source),
            y=torch.from_numpy(np.asarray(y, dtype=np.float32)) if continuous else _as_labels(np.asarray(y)),
            train_mask=torch.from_numpy(np.asarray(train_mask).astype(bool)),
            val_mask=torch.from_numpy(np.asarray(val_mask).astype(bool)),
            test_mask=torch.from_numpy(np.asarray(test_mask).astype(bool)),
            name=name,
            edge_attr=None
            if edge_attr is None
            else _as_edge_features(np.asarray(edge_attr), src.size, source)[torch.from_numpy(order)],
            enc=encodings.as_tensors(encodings.counted([(src, dst)], num_nodes)),
        )
        graph.validate(source)
        return graph

    def validate(self, source: str = "graph") -> None:
        """Raises ValueError naming ``source`` and the problem if any array is inconsistent."""
        n = self.num_nodes
        if n < 0 or self.rowptr.dtype != torch.int64:
            raise ValueError(f"{source}: rowptr must be int64 with N+1 entries")
        if self.rowptr[0] != 0 or self.rowptr[-1] != self.num_edges:
            raise ValueError(f"{source}: rowptr must start at 0 and end at the edge count {self.num_edges}")
        if n and bool((self.rowptr[1:] < self.rowptr[:-1]).any()):
            raise ValueError(f"{source}: rowptr is not monotone")
        if self.num_edges and (int(self.col.min()) < 0 or int(self.col.max()) >= n):
            raise ValueError(f"{source}: an edge source index is outside [0, {n})")
        if self.x.ndim != 2:
            raise ValueError(f"{source}: features 'x' must be 2-D [N, F], got shape {tuple(self.x.shape)}")
        node_arrays = {name: getattr(self, name) for name in ("x", "y", "train_mask", "val_mask", "test_mask")}
        for name, array in {**node_arrays, **self.enc}.items():
            if array.shape[0] != n:
                raise ValueError(f"{source}: array '{name}' has {array.shape[0]} rows but the graph has {n} nodes")
        if not bool(torch.isfinite(self.x).all()):
            bad = int((~torch.isfinite(self.x)).any(dim=1).nonzero()[0, 0])
            raise ValueError(f"{source}: features 'x' contain NaN or Inf (first at node {bad})")
        check_edge_features(self.edge_attr, self.added_loops, self.num_edges, source)
        if self.multilabel or self.y.is_floating_point():
            return  # missing labels are NaN, a continuous target is any float; label_checks.py checked the values
        if n and int(self.y.min()) < -1:
            raise ValueError(f"{source}: labels 'y' must be class ids >= 0 (or -1 for unlabelled)")
        for name in ("train_mask", "val_mask", "test_mask"):
            mask = getattr(self, name)
            if bool((mask & (self.y < 0)).any()):
                raise ValueError(f"{source}: '{name}' selects a node whose label is -1 (unlabelled)")

    def in_degrees(self) -> torch.Tensor:
        return self.rowptr[1:] - self.rowptr[:-1]

    def with_self_loops(self) -> Graph:
        """Returns a copy where every node also attends to itself (one self loop per row, appended
        unless the row already has one). With edge features, the added loops get zero rows and are
        marked in ``added_loops``; a loop the graph had keeps its features."""
        n = self.num_nodes
        dst = torch.repeat_interleave(torch.arange(n), self.in_degrees())
        has_loop = torch.zeros(n, dtype=torch.bool)
        has_loop[dst[self.col.long() == dst]] = True
        missing = (~has_loop).nonzero().squeeze(1)
        src_all = torch.cat([self.col.long(), missing])
        dst_all = torch.cat([dst, missing])
        order = torch.sort(
            dst_all * (n + 1) + src_all, stable=True
        ).indices  # sort by (dst, src), repeated edges in order
        rowptr = torch.zeros(n + 1, dtype=torch.int64)
        rowptr[1:] = torch.cumsum(torch.bincount(dst_all, minlength=n), 0)
        edge_attr = added = None
        if self.edge_attr is not None:
            edge_attr = torch.cat([self.edge_attr, self.edge_attr.new_zeros(missing.numel(), self.num_edge_features)])[
                order
            ]
            before = self.added_loops if self.added_loops is not None else torch.zeros(self.num_edges, dtype=torch.bool)
            added = torch.cat([before, torch.ones(missing.numel(), dtype=torch.bool)])[order]
        return Graph(
            rowptr=rowptr,
            col=src_all[order].to(torch.int32),
            x=self.x,
            y=self.y,
            train_mask=self.train_mask,
            val_mask=self.val_mask,
            test_mask=self.test_mask,
            name=self.name,
            edge_attr=edge_attr,
            added_loops=added,
            enc=self.enc,
        )

    def rows(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The CSR block of destination rows [start, end): (rowptr rebased to 0, col with global ids)."""
        lo, hi = self.edge_range(start, end)
        return self.rowptr[start : end + 1] - lo, self.col[lo:hi]


def _check_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, source: str) -> None:
    if src.ndim != 1 or dst.ndim != 1:
        raise ValueError(f"{source}: 'src' and 'dst' must be 1-D arrays")
    if src.shape != dst.shape:
        raise ValueError(f"{source}: 'src' has {src.size} entries but 'dst' has {dst.size}")
    for name, arr in (("src", src), ("dst", dst)):
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{source}: '{name}' must hold integer node ids, got {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= num_nodes):
            bad = int(np.nonzero((arr < 0) | (arr >= num_nodes))[0][0])
            raise ValueError(
                f"{source}: edge index out of range in '{name}' at position {bad}: {int(arr[bad])} "
                f"is not in [0, {num_nodes})"
            )
    if num_nodes > MAX_NODES:
        raise ValueError(f"{source}: {num_nodes} nodes exceed the int32 limit {MAX_NODES}")


def check_edge_features(edge_attr, added_loops, num_edges: int, source: str) -> None:
    """ValueError naming ``source`` unless edge_attr is None or float32 [E, F_e] and finite, and
    added_loops None or bool [E] (only beside edge_attr)."""
    if edge_attr is None:
        if added_loops is not None:
            raise ValueError(f"{source}: 'added_loops' marks self loops of edge features, but there is no 'edge_attr'")
        return
    if edge_attr.ndim != 2 or edge_attr.shape[0] != num_edges:
        raise ValueError(
            f"{source}: edge features 'edge_attr' must be [E, F_e] with E = {num_edges} edges, got shape "
            f"{tuple(edge_attr.shape)}"
        )
    if edge_attr.dtype != torch.float32:
        raise ValueError(f"{source}: edge features 'edge_attr' must be float32, got {edge_attr.dtype}")
    finite = torch.isfinite(edge_attr).all(dim=1)
    if not bool(finite.all()):
        raise ValueError(
            f"{source}: edge features 'edge_attr' contain NaN or Inf (first at edge {int((~finite).nonzero()[0, 0])} "
            "in CSR order)"
        )
    if added_loops is not None and (added_loops.dtype != torch.bool or tuple(added_loops.shape) != (num_edges,)):
        raise ValueError(
            f"{source}: 'added_loops' must be bool [E] with E = {num_edges}, got {added_loops.dtype} "
            f"{tuple(added_loops.shape)}"
        )


def _as_edge_features(edge_attr: np.ndarray, num_edges: int, source: str) -> torch.Tensor:
    """float32 [E, F_e] from a numeric [E] or [E, F_e] array, one row per input edge."""
    if edge_attr.ndim == 1:
        edge_attr = edge_attr.reshape(-1, 1)
    if edge_attr.ndim != 2 or edge_attr.shape[0] != num_edges:
        raise ValueError(
            f"{source}: edge features 'edge_attr' must be [E, F_e] with E = {num_edges} edges, got shape "
            f"{edge_attr.shape}"
        )
    if not (np.issubdtype(edge_attr.dtype, np.number) or edge_attr.dtype == np.bool_):
        raise ValueError(f"{source}: edge features 'edge_attr' must be numeric, got {edge_attr.dtype}")
    return torch.from_numpy(np.ascontiguousarray(edge_attr, dtype=np.float32))


def _as_labels(y: np.ndarray) -> torch.Tensor:
    """int64 class ids [N], or float32 [N, T] multi-label targets (-1 becomes NaN: missing)."""
    if y.ndim == 2:
        y = y.astype(np.float32)
        y[y == -1] = np.nan
        return torch.from_numpy(y)
    return torch.from_numpy(y.astype(np.int64))


def _as_features(x: np.ndarray, source: str) -> torch.Tensor:
    if x.ndim != 2:
        raise ValueError(f"{source}: features 'x' must be 2-D [N, F], got shape {x.shape}")
    if not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
        raise ValueError(f"{source}: features 'x' must be numeric, got {x.dtype}")
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
