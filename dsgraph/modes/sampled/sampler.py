"""L-hop in-neighbour sampling for a mini-batch of seed nodes, deduplicated once per batch and
relabelled into a compact CSR that ``sparse_attention`` consumes unchanged.

How a batch is sampled
----------------------
Hop 1 expands the seeds, hop h+1 expands the nodes drawn at hop h; hop h draws up to
``fanouts[h-1]`` in-neighbours of each node, uniformly without replacement. The draw for node v is
a pure function of (batch key, v): it is the prefix of one random permutation of v's in-edges
(a partial Fisher-Yates shuffle driven by a counter-based hash). So

* the same seed, epoch and batch always give the same subgraph, in any thread, on any rank count;
* every occurrence of v in every seed's tree draws the same neighbours, and a smaller fanout draws a
  prefix of a larger one: the per-seed sampling trees of a batch overlap exactly where the graph
  makes them overlap, and deduplicating their union once per batch loses nothing.

``nodes_before_dedup`` is the total size of the per-seed trees (seeds plus every drawn id, counted
with repetition: what a sampler that gathers per seed would fetch). The batch's node set is the
sorted unique of all drawn ids (the dedup, once per batch), relabelled with the seeds first.

How the subgraph feeds the model
--------------------------------
The Graph Transformer runs every layer on one node set, so the batch becomes one compact graph:
the union node set, and as in-edges of node v the neighbours drawn for v (the draw of the largest
fanout among the hops that expanded v), plus a self loop per node if asked (each edge once: a pair
drawn twice, or a loop the graph has, is not doubled). ``edge_ids`` says which edge of the whole
graph each compact edge is (-1 for an added self loop), so edge features follow. Running the unchanged
model on it for L layers gives every seed exactly its sampled L-hop receptive field: a seed's
output at layer L reads its hop-1 neighbours at layer L-1, which read their hop-2 draws, and so on;
rows of the outermost hop (never expanded) only feed layer 1. Only seed rows carry the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on a uint64 array (wraps modulo 2^64)."""
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def batch_key(seed: int, epoch: int, batch: int) -> int:
    """The 64-bit key that drives the sampling of one mini-batch."""
    key = np.zeros(1, dtype=np.uint64)
    for part in (seed, epoch, batch):
        key = _splitmix64(key ^ np.uint64(part & 0xFFFFFFFFFFFFFFFF))
    return int(key[0])


def keyed_uniform(key: int, nodes: np.ndarray, draw: int) -> np.ndarray:
    """Uniform [0, 1) doubles, one per node: the ``draw``-th random number of each node under ``key``."""
    h = _splitmix64(_splitmix64(nodes.astype(np.uint64) ^ np.uint64(key)) + np.uint64(draw))
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53


def permutation_prefix(key: int, nodes: np.ndarray, degrees: np.ndarray, k: int) -> np.ndarray:
    """The first ``k`` entries of a keyed random permutation of range(degree) for every node whose
    degree exceeds ``k``: int64 [m, k] edge offsets, distinct within a row.

    A partial Fisher-Yates shuffle, vectorised over nodes: step j swaps position j with a position
    r_j in [j, degree). Positions touched by earlier swaps are remembered in (keys, vals) pairs,
    at most k per node, so the work is O(m * k^2) whatever the degrees.
    """
    m = nodes.shape[0]
    out = np.empty((m, k), dtype=np.int64)
    keys = np.empty((m, k), dtype=np.int64)  # keys[:, j]: a position written at step j
    vals = np.empty((m, k), dtype=np.int64)  # vals[:, j]: the value stored there at step j
    rows = np.arange(m)
    for j in range(k):
        r = j + np.floor(keyed_uniform(key, nodes, j) * (degrees - j)).astype(np.int64)
        out[:, j] = _read(keys[:, :j], vals[:, :j], r, rows)
        vals[:, j] = _read(keys[:, :j], vals[:, :j], np.full(m, j), rows)
        keys[:, j] = r
    return out


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """The distinct values of ``a``, ascending (a sort and a neighbour compare)."""
    a = np.sort(a, kind="stable")
    if a.size == 0:
        return a
    keep = np.empty(a.size, dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def _read(keys: np.ndarray, vals: np.ndarray, pos: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The value at position ``pos`` of each row's virtual permutation: the latest write, else pos."""
    if keys.shape[1] == 0:
        return pos.copy()
    match = keys == pos[:, None]
    last = keys.shape[1] - 1 - np.argmax(match[:, ::-1], axis=1)
    return np.where(match.any(axis=1), vals[rows, last], pos)


@dataclass
class SampledSubgraph:
    """One rank's sampled mini-batch graph, relabelled to compact ids 0..n-1 (seeds first)."""

    node_ids: torch.Tensor  # int64 [n] global id of each compact node; node_ids[:num_seeds] are the seeds
    num_seeds: int
    rowptr: torch.Tensor  # int64 [n+1] compact CSR by destination
    col: torch.Tensor  # int32 [e] compact source ids
    nodes_before_dedup: int  # total size of the per-seed sampling trees (seeds included)
    edge_ids: torch.Tensor | None = (
        None  # int64 [e]: the whole graph's CSR edge of each edge, -1 for an added self loop
    )

    @property
    def num_nodes(self) -> int:
        """Nodes after the per-batch dedup: the rows whose features are gathered."""
        return self.node_ids.numel()

    @property
    def num_edges(self) -> int:
        return self.col.numel()


class NeighborSampler:
    """Samples the L-hop in-neighbourhood of seed batches from a CSR-by-destination graph.

    rowptr: int64 [N+1]; col: int32/int64 [E] in-neighbour sources; fanouts: draws per node at hop
    1..L (one per model layer); self_loops: give every compact node a self loop (matching a
    full-graph model trained with self loops).
    """

    def __init__(self, rowptr: torch.Tensor, col: torch.Tensor, fanouts: list[int], *, self_loops: bool = True):
        if not fanouts or any(int(f) < 1 for f in fanouts):
            raise ValueError(f"fanouts must be a non-empty list of positive integers, got {fanouts}")
        self.rowptr = np.ascontiguousarray(
            rowptr.numpy() if isinstance(rowptr, torch.Tensor) else rowptr, dtype=np.int64
        )
        self.col = np.asarray(col.numpy() if isinstance(col, torch.Tensor) else col)
        self.fanouts = [int(f) for f in fanouts]
        self.self_loops = self_loops
        self.num_nodes = self.rowptr.shape[0] - 1

    def sample(self, seeds, key: int) -> SampledSubgraph:
        """The compact subgraph of ``seeds`` (distinct global ids) under the batch ``key``."""
        seeds = np.asarray(seeds, dtype=np.int64)
        if seeds.ndim != 1 or seeds.size == 0 or seeds.min() < 0 or seeds.max() >= self.num_nodes:
            raise ValueError(f"seeds must be a non-empty 1-D array of node ids in [0, {self.num_nodes})")
        if sorted_unique(seeds).size != seeds.size:
            raise ValueError("seeds of one mini-batch must be distinct")
        frontier, mult = seeds, np.ones(seeds.size)  # distinct nodes of this hop, occurrences in the trees
        before = seeds.size
        dst_parts, src_parts, edge_parts = [], [], []
        for fanout in self.fanouts:
            degrees = self.rowptr[frontier + 1] - self.rowptr[frontier]
            src, owner, edge = self._draw(frontier, degrees, fanout, key)
            before += int(np.dot(mult, np.minimum(degrees, fanout)))
            dst_parts.append(frontier[owner])
            src_parts.append(src)
            edge_parts.append(edge)
            frontier, inverse = np.unique(src, return_inverse=True)
            mult = np.bincount(inverse, weights=mult[owner], minlength=frontier.size)
        return self._compact(
            seeds, np.concatenate(dst_parts), np.concatenate(src_parts), np.concatenate(edge_parts), before
        )

    def _draw(
        self, nodes: np.ndarray, degrees: np.ndarray, fanout: int, key: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Up to ``fanout`` distinct in-neighbours of each node: (source ids, index into ``nodes``,
        the CSR edge of each)."""
        owner, offset = draw_offsets(nodes, degrees, fanout, key)
        edge = self.rowptr[nodes[owner]] + offset
        return self.col[edge].astype(np.int64), owner, edge

    def _compact(
        self, seeds: np.ndarray, dst: np.ndarray, src: np.ndarray, edges: np.ndarray, before: int
    ) -> SampledSubgraph:
        return compact(seeds, dst, src, edges, before, self.self_loops)


def draw_offsets(nodes: np.ndarray, degrees: np.ndarray, fanout: int, key: int) -> tuple[np.ndarray, np.ndarray]:
    """Which in-edges of each node (``nodes``: the ids that key the draw, ``degrees``: their
    in-degrees) a hop draws: (index into ``nodes``, offset within that node's row) of every drawn
    edge; every in-edge of a node with at most ``fanout``, else a keyed permutation's prefix."""
    small = np.nonzero(degrees <= fanout)[0]  # take every in-edge
    counts = degrees[small]
    owner_small = np.repeat(small, counts)
    first = np.cumsum(counts) - counts
    offset_small = np.arange(owner_small.size) - np.repeat(first, counts)
    big = np.nonzero(degrees > fanout)[0]
    offset_big = permutation_prefix(key, nodes[big], degrees[big], fanout)
    owner = np.concatenate([owner_small, np.repeat(big, fanout)])
    return owner, np.concatenate([offset_small, offset_big.reshape(-1)])


def compact(
    seeds: np.ndarray, dst: np.ndarray, src: np.ndarray, edges: np.ndarray, before: int, self_loops: bool
) -> SampledSubgraph:
    """The batch's compact subgraph from its drawn edges (dst <- src, global ids; ``edges``: the
    whole graph's edge of each): the node set deduplicated, seeds first, each edge once."""
    uniq = sorted_unique(np.concatenate([seeds, src]))  # the dedup, once per batch
    n = uniq.size
    seed_pos = np.searchsorted(uniq, seeds)
    is_seed = np.zeros(n, dtype=bool)
    is_seed[seed_pos] = True
    order_nodes = np.concatenate([seed_pos, np.nonzero(~is_seed)[0]])  # compact id -> position in uniq
    compact_of = np.empty(n, dtype=np.int64)
    compact_of[order_nodes] = np.arange(n)
    dst_c = compact_of[np.searchsorted(uniq, dst)]
    src_c = compact_of[np.searchsorted(uniq, src)]
    keys = dst_c * n + src_c
    if self_loops:  # after the drawn edges: a loop the graph has is kept, with its edge id
        keys, edges = (
            np.concatenate([keys, np.arange(n) * (n + 1)]),
            np.concatenate([edges, np.full(n, -1, np.int64)]),
        )
    order = np.argsort(keys, kind="stable")
    keys, edges = keys[order], edges[order]
    first = np.ones(keys.size, dtype=bool)
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    keys, edges = keys[first], edges[first]  # sorted by (dst, src): CSR order, each edge once
    rowptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // n, minlength=n), out=rowptr[1:])
    return SampledSubgraph(
        node_ids=torch.from_numpy(uniq[order_nodes]),
        num_seeds=seeds.size,
        rowptr=torch.from_numpy(rowptr),
        col=torch.from_numpy((keys % n).astype(np.int32)),
        nodes_before_dedup=before,
        edge_ids=torch.from_numpy(edges.astype(np.int64)),
    )
