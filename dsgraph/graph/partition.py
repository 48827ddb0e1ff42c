"""Node partitioning: assign every node to a part, relabel so each part is one id range, and measure.

Everything here is a pure function of its inputs (no files, no processes), so it is tested directly.

- ``partition_nodes`` assigns nodes to parts with one of ``METHODS``.
- ``relabel`` renumbers nodes so part r owns the contiguous ids ``[start_r, end_r)``.
- ``partition_quality`` measures edge cut, node and edge balance and halo sizes of a relabelled graph.
- ``halo_ids`` lists the remote sources one part's rows read (the ids a halo exchange must fetch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from dsgraph.graph.graph import Graph
from dsgraph.graph.split import balanced_bounds

METHODS = ("metis", "random", "contiguous", "balanced")
METIS_BALANCE = ("nodes", "edges")


def partition_nodes(
    graph: Graph,
    num_parts: int,
    method: str,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
    *,
    metis_balance: str = "nodes",
) -> np.ndarray:
    """Part id of every node: int64 [N] with values in [0, num_parts).

    Methods:
    - ``metis``: METIS (recursive bisection up to 8 parts, k-way above) on the symmetrised adjacency
      without self loops; minimises cut edges while balancing ``metis_balance``: "nodes" (equal
      node counts) or "edges" (vertex weight = in-degree + 1, so the in-edge work per part is equal;
      on power-law graphs node-balanced parts can differ several-fold in edges).
    - ``random``: a seeded random assignment with node counts that differ by at most one.
    - ``contiguous``: equal node ranges in the input order.
    - ``balanced``: contiguous ranges in the input order whose boundaries equalise the in-edges
      (attention work) per part rather than the node counts.

    ``log`` receives one-line phase messages for the slow steps (METIS on large graphs).
    """
    n = graph.num_nodes
    if method not in METHODS:
        raise ValueError(f"unknown partition method '{method}'; choose from {', '.join(METHODS)}")
    if metis_balance not in METIS_BALANCE:
        raise ValueError(f"unknown metis_balance '{metis_balance}'; choose from {', '.join(METIS_BALANCE)}")
    if not 1 <= num_parts <= max(n, 1):
        raise ValueError(f"cannot split a graph of {n} nodes into {num_parts} parts; need 1 <= parts <= {n}")
    if num_parts == 1:
        return np.zeros(n, dtype=np.int64)
    if method == "metis":
        return _metis_parts(graph, num_parts, seed, metis_balance, log or (lambda msg: None))
    if method == "random":
        parts = np.empty(n, dtype=np.int64)
        parts[np.random.default_rng(seed).permutation(n)] = np.arange(n) % num_parts
        return parts
    if method == "contiguous":
        return np.arange(n, dtype=np.int64) * num_parts // n
    return _ranges_to_parts(balanced_bounds(graph.in_degrees().numpy(), num_parts), n)


def symmetric_adjacency(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """The undirected simple graph METIS needs: (xadj [N+1], adjncy [2M]) in METIS' index dtype.

    Each directed edge u -> v (u != v) becomes {u, v}; both directions are stored once. Built from
    one sorted int64 key array so the peak is a few E-sized arrays, with temporaries freed early.
    """
    import pymetis

    n = graph.num_nodes
    idx_dtype = pymetis.zero_copy_dtype()
    src = graph.col.numpy().astype(np.int64)  # [E]
    dst = np.repeat(np.arange(n, dtype=np.int64), graph.in_degrees().numpy())  # [E]
    keep = src != dst
    src, dst = src[keep], dst[keep]
    del keep
    keys = np.empty(2 * src.size, dtype=np.int64)  # [2E] row * n + neighbour, both directions
    np.multiply(dst, n, out=keys[: src.size])
    keys[: src.size] += src
    np.multiply(src, n, out=keys[src.size :])
    keys[src.size :] += dst
    del src, dst
    keys.sort()
    if keys.size:
        unique = np.empty(keys.size, dtype=bool)
        unique[0] = True
        np.not_equal(keys[1:], keys[:-1], out=unique[1:])
        keys = keys[unique]
        del unique
    rows, adjncy = np.divmod(keys, n)
    del keys
    adjncy = adjncy.astype(idx_dtype, copy=False)
    xadj = np.zeros(n + 1, dtype=idx_dtype)
    np.cumsum(np.bincount(rows, minlength=n), out=xadj[1:])
    del rows
    return xadj, adjncy


def _metis_parts(graph: Graph, num_parts: int, seed: int, balance: str, log: Callable[[str], None]) -> np.ndarray:
    import pymetis

    log(f"building the symmetric adjacency of {graph.num_nodes:,} nodes and {graph.num_edges:,} edges")
    xadj, adjncy = symmetric_adjacency(graph)
    scheme = "recursive bisection" if num_parts <= 8 else "k-way"  # pymetis' default choice
    log(
        f"running METIS ({scheme}) into {num_parts} parts on {adjncy.size:,} adjacency entries "
        "(METIS reports no progress)"
    )
    vweights = None
    if balance == "edges":  # in-edges plus the self loop the model adds, so isolated nodes count too
        vweights = (graph.in_degrees().numpy() + 1).astype(xadj.dtype)
    options = pymetis.Options(seed=int(seed))
    result = pymetis.part_graph(num_parts, pymetis.CSRAdjacency(xadj, adjncy), vweights=vweights, options=options)
    del xadj, adjncy
    return np.asarray(result.vertex_part, dtype=np.int64)


def _ranges_to_parts(bounds: np.ndarray, n: int) -> np.ndarray:
    return np.repeat(np.arange(bounds.size - 1, dtype=np.int64), np.diff(bounds))[:n]


def relabel(graph: Graph, parts: np.ndarray, num_parts: int | None = None) -> tuple[Graph, np.ndarray, np.ndarray]:
    """Renumbers nodes so that part r owns the contiguous ids [start_r, end_r).

    ``num_parts`` defaults to ``parts.max() + 1``; pass it when a method may leave a part empty.

    Returns ``(new_graph, perm, node_ranges)``: ``perm`` int64 [N] maps new id -> original id,
    ``node_ranges`` int64 [P, 2] holds (start, end) per part. Nodes keep their relative order
    inside a part, and every row keeps its in-neighbours in the original order (renumbered); edge
    features move with their edges.
    """
    n = graph.num_nodes
    parts = np.asarray(parts)
    if parts.shape != (n,) or not np.issubdtype(parts.dtype, np.integer):
        raise ValueError(f"parts must be an integer array of shape ({n},), got {parts.dtype} {parts.shape}")
    if n and parts.min() < 0:
        raise ValueError("parts must be non-negative part ids")
    if num_parts is None:
        num_parts = int(parts.max()) + 1 if n else 0
    elif n and parts.max() >= num_parts:
        raise ValueError(f"parts holds part id {int(parts.max())} but num_parts is {num_parts}")
    perm = np.argsort(parts, kind="stable").astype(np.int64)  # [N] new id -> old id
    inverse = np.empty(n, dtype=np.int64)  # [N] old id -> new id
    inverse[perm] = np.arange(n, dtype=np.int64)
    sizes = np.bincount(parts, minlength=num_parts)  # [P]
    node_ranges = np.stack([np.cumsum(sizes) - sizes, np.cumsum(sizes)], axis=1).astype(np.int64)  # [P, 2]

    rowptr = graph.rowptr.numpy()
    degree = np.diff(rowptr)[perm]  # [N] in-degree of each new row
    new_rowptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degree, out=new_rowptr[1:])
    # old edge position of every new edge: the old row start plus the offset inside the row
    edge_src = np.repeat(rowptr[:-1][perm] - new_rowptr[:-1], degree)  # [E]
    edge_src += np.arange(edge_src.size, dtype=np.int64)
    new_col = inverse[graph.col.numpy()[edge_src]].astype(np.int32)  # [E]
    edges = {}
    if graph.edge_attr is not None:
        moved = torch.from_numpy(edge_src)
        edges = {
            "edge_attr": graph.edge_attr[moved],
            "added_loops": None if graph.added_loops is None else graph.added_loops[moved],
        }
    del edge_src

    perm_t = torch.from_numpy(perm)
    new_graph = Graph(
        rowptr=torch.from_numpy(new_rowptr),
        col=torch.from_numpy(new_col),
        x=graph.x[perm_t],
        y=graph.y[perm_t],
        train_mask=graph.train_mask[perm_t],
        val_mask=graph.val_mask[perm_t],
        test_mask=graph.test_mask[perm_t],
        name=graph.name,
        **edges,
        enc={name: array[perm_t] for name, array in graph.enc.items()},
    )
    return new_graph, perm, node_ranges


def halo_ids(col_block: np.ndarray, start: int, end: int) -> np.ndarray:
    """Sorted unique source ids of ``col_block`` outside the owned range [start, end): int32 [H]."""
    col_block = np.asarray(col_block)
    remote = col_block[(col_block < start) | (col_block >= end)]
    return np.unique(remote).astype(np.int32)


@dataclass(kw_only=True, slots=True)
class PartitionQuality:
    """How good a partition is for graph-parallel attention (all figures over in-edges)."""

    num_parts: int
    part_nodes: list[int]
    """Nodes owned by each part."""
    part_edges: list[int]
    """In-edges of the rows each part owns (its share of attention work)."""
    halo_sizes: list[int]
    """Distinct remote source nodes each part reads (rows a halo exchange must fetch)."""
    send_sizes: list[int]
    """Rows of each part that other parts read (rows a halo exchange sends; a row read by two parts counts twice)."""
    cut_edges: int
    """Edges whose source lies in another part than their destination."""
    num_edges: int

    @property
    def edge_cut_pct(self) -> float:
        return 100.0 * self.cut_edges / self.num_edges if self.num_edges else 0.0

    @property
    def node_balance(self) -> float:
        """Largest part's node count over the mean (1.0 is perfect)."""
        return _max_over_mean(self.part_nodes)

    @property
    def edge_balance(self) -> float:
        """Largest part's in-edge count over the mean (1.0 is perfect)."""
        return _max_over_mean(self.part_edges)

    def as_dict(self) -> dict:
        return {
            "num_parts": self.num_parts,
            "edge_cut_pct": self.edge_cut_pct,
            "cut_edges": self.cut_edges,
            "num_edges": self.num_edges,
            "node_balance": self.node_balance,
            "edge_balance": self.edge_balance,
            "part_nodes": list(self.part_nodes),
            "part_edges": list(self.part_edges),
            "halo_sizes": list(self.halo_sizes),
            "send_sizes": list(self.send_sizes),
        }


def _max_over_mean(values: list[int]) -> float:
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean else 1.0


def partition_quality(graph: Graph, node_ranges: np.ndarray, halos: list[np.ndarray] | None = None) -> PartitionQuality:
    """Measures a relabelled graph whose part r owns rows ``node_ranges[r]``.

    ``halos`` (one ``halo_ids`` array per part) is computed when not given.
    """
    rowptr = graph.rowptr.numpy()
    col = graph.col.numpy()
    ranges = np.asarray(node_ranges, dtype=np.int64).reshape(-1, 2)
    part_nodes, part_edges, part_halos, cut = [], [], [], 0
    for r, (start, end) in enumerate(ranges.tolist()):
        block = col[rowptr[start] : rowptr[end]]
        remote = (block < start) | (block >= end)
        cut += int(np.count_nonzero(remote))
        part_halos.append(halos[r] if halos is not None else np.unique(block[remote]))
        part_nodes.append(end - start)
        part_edges.append(int(block.size))
    read = np.concatenate(part_halos) if part_halos else np.zeros(0, np.int64)
    owner = np.searchsorted(ranges[:, 1], read, side="right")  # the part that owns each halo row
    return PartitionQuality(
        num_parts=len(part_nodes),
        part_nodes=part_nodes,
        part_edges=part_edges,
        halo_sizes=[int(h.size) for h in part_halos],
        send_sizes=np.bincount(owner, minlength=len(part_nodes)).astype(int).tolist(),
        cut_edges=cut,
        num_edges=graph.num_edges,
    )
