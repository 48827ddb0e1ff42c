"""The graph as ``dsgraph encode`` reads it: out- and in-neighbour lists of every node.

Edges come in chunks (a dataset ``.npz`` through ``DatasetFile.chunks``, or the parts of a
partition store), are kept as int32 source and destination arrays, and become two CSRs sorted by
(node, neighbour): ``out`` lists the destinations of each node's out-edges (the steps a random walk
takes), ``in`` the sources of its in-edges (where a walk can return from). Duplicate edges stay
(a multi-edge weighs as many times as it occurs); self loops stay. Memory: about 24 bytes per edge
while sorting, 16 per edge after.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsgraph.graph.graph import MAX_NODES


@dataclass(frozen=True, slots=True)
class Adjacency:
    """``out_ptr``/``out_col``: int64 [N+1] / int32 [E], out-neighbours of each node, ascending;
    ``in_ptr``/``in_col``: the same for in-neighbours. ``node_keys`` int64 [N]: the dataset's id of
    every node (the store's permutation, or 0..N-1), which keys the random walks."""

    num_nodes: int
    out_ptr: np.ndarray
    out_col: np.ndarray
    in_ptr: np.ndarray
    in_col: np.ndarray
    node_keys: np.ndarray

    @property
    def num_edges(self) -> int:
        return int(self.out_col.size)

    def degrees(self) -> np.ndarray:
        """int64 [N, 2]: in- and out-degree of every node."""
        return np.stack([np.diff(self.in_ptr), np.diff(self.out_ptr)], axis=1)


def sorted_csr(rows: np.ndarray, cols: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """(ptr int64 [N+1], col int32 [E]): ``cols`` grouped by ``rows``, ascending within each row."""
    order = np.argsort(rows.astype(np.int64) * num_nodes + cols, kind="stable")
    ptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_nodes), out=ptr[1:])
    return ptr, cols[order]


def from_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, node_keys: np.ndarray | None = None) -> Adjacency:
    """The adjacency of the edges src -> dst (int32 or int64 ids in [0, num_nodes))."""
    if num_nodes > MAX_NODES:
        raise ValueError(f"{num_nodes} nodes exceed the int32 limit {MAX_NODES}")
    src, dst = np.asarray(src, dtype=np.int32), np.asarray(dst, dtype=np.int32)
    out_ptr, out_col = sorted_csr(src, dst, num_nodes)
    in_ptr, in_col = sorted_csr(dst, src, num_nodes)
    keys = np.arange(num_nodes, dtype=np.int64) if node_keys is None else np.asarray(node_keys, dtype=np.int64)
    return Adjacency(
        num_nodes=num_nodes, out_ptr=out_ptr, out_col=out_col, in_ptr=in_ptr, in_col=in_col, node_keys=keys
    )


def from_chunks(chunks, num_nodes: int, num_edges: int, node_keys: np.ndarray | None = None) -> Adjacency:
    """The adjacency of edge chunks ``(first edge, src, dst, edge features)`` (``DatasetFile.chunks``) holding
    ``num_edges`` edges in all, copied into int32 arrays as they come."""
    src = np.empty(num_edges, dtype=np.int32)
    dst = np.empty(num_edges, dtype=np.int32)
    filled = 0
    for _, s, d, _ in chunks:
        src[filled : filled + s.size], dst[filled : filled + d.size] = s, d
        filled += s.size
    if filled != num_edges:
        raise ValueError(f"expected {num_edges} edges, read {filled}")
    return from_edges(src, dst, num_nodes, node_keys)
