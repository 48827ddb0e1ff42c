"""Isolated (Grappa-style) training, the pure part: chunks, the round-robin schedule, the halo
cache's choice of nodes, a rank's local subgraph, the correction weights and the local mini-batches.
No files, no processes.

Scheme (C chunks, W ranks, k = C / W chunks per rank, k even when W > 1):

- The nodes are split into C chunks (``assign_chunks``) and relabelled so every chunk is one id range.
- Round-robin rotation (seed section 2.4). Super-epoch s plays round s mod (C - 1) of a round-robin
  tournament of the chunks (the circle method): the chunks form C / 2 pairs, and over the C - 1
  rounds of a cycle every two chunks are paired exactly once. A rank holds k / 2 pairs, and which
  rank holds which pairs shifts by one every super-epoch, so the chunks (and the work) travel over
  all ranks: W and C - 1 are coprime, so over W (C - 1) super-epochs each rank holds each chunk
  C - 1 times.
- A chunk is held by exactly one rank in a super-epoch, so every training node's loss counts once
  per epoch, and over one cycle every edge lies inside the chunks of the rank that holds its
  destination (the chunks of its two ends are paired in some round).
- Halo cache (seed section 2.2). A rank also keeps the features of up to ``halo_fraction * n`` nodes
  outside its chunks (n: its rows), those feeding the most of its in-edges (``select_halo``). They
  arrive at the start of the super-epoch from the rank that holds them; in the local subgraph
  (``local_subgraph``) a halo row feeds its edges into the rank's rows and attends only to itself.
- Correction (seed section 3.1). In a super-epoch a node keeps ``kept`` of its ``degree`` in-edges;
  averaged over a cycle it keeps E[kept] (``cycle_plan``). Its loss weight is the seed's resampling
  factor (``resampling_correction``) or one of the variants of ``correction_weights``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from dsgraph.graph import Graph
from dsgraph.graph.partition import partition_nodes

CHUNK_METHODS = ("random", "metis")
CORRECTIONS = ("resample", "uniform", "coverage", "none")


def assign_chunks(graph: Graph, num_chunks: int, method: str = "random", seed: int = 0) -> np.ndarray:
    """Chunk id of every node: int64 [N] in [0, num_chunks). ``method`` is 'random' (seeded, sizes
    differ by at most one) or 'metis' (few edges between chunks)."""
    if method not in CHUNK_METHODS:
        raise ValueError(f"unknown chunk method '{method}'; choose from {', '.join(CHUNK_METHODS)}")
    return partition_nodes(graph, num_chunks, method, seed)


def default_num_chunks(num_chunks: int, world_size: int) -> int:
    """``num_chunks``, or 2 * world_size when it is 0 (the config's default)."""
    return num_chunks if num_chunks else 2 * world_size


@dataclass(frozen=True, slots=True)
class RotationSchedule:
    """Which chunks rank r holds in super-epoch s (see the module docstring)."""

    num_chunks: int
    world_size: int

    def __post_init__(self) -> None:
        w, c = self.world_size, self.num_chunks
        if w < 1:
            raise ValueError(f"world size must be >= 1, got {w}")
        if c < w or c % w:
            raise ValueError(
                f"isolated training needs a chunk count that is a positive multiple of the {w} ranks, got {c}; "
                f"set 'isolated_chunks' to e.g. {2 * w} (or 0 for 2 x ranks)"
            )
        if w > 1 and (c // w) % 2:
            raise ValueError(
                f"the round-robin rotation moves chunks in pairs, so each of the {w} ranks needs an even number "
                f"of chunks; got {c} chunks ({c // w} per rank): set 'isolated_chunks' to a multiple of {2 * w} "
                f"(or 0 for {2 * w})"
            )

    @property
    def chunks_per_rank(self) -> int:
        return self.num_chunks // self.world_size

    @property
    def cycle_length(self) -> int:
        """Super-epochs until the pairs repeat: C - 1 (1 on one rank, which holds every chunk)."""
        return self.num_chunks - 1 if self.world_size > 1 else 1

    def pairs(self, super_epoch: int) -> list[tuple[int, int]]:
        """The C / 2 chunk pairs of round ``super_epoch mod (C - 1)``: chunk 0 stays in place and
        the other chunks turn one position per round (the circle method)."""
        c = self.num_chunks
        t = super_epoch % (c - 1)
        ring = [0] + [1 + (i + t) % (c - 1) for i in range(c - 1)]
        return [(ring[j], ring[c - 1 - j]) for j in range(c // 2)]

    def group(self, rank: int, super_epoch: int) -> int:
        """The group of pairs ``rank`` holds: group g is pairs [g k/2, (g+1) k/2), and the groups
        shift by one rank every super-epoch."""
        return (rank - super_epoch) % self.world_size

    def group_chunks(self, group: int, super_epoch: int) -> list[int]:
        """The chunks of ``group`` in ``super_epoch``, sorted."""
        if self.world_size == 1:
            return list(range(self.num_chunks))
        half = self.chunks_per_rank // 2
        return sorted(c for pair in self.pairs(super_epoch)[group * half : (group + 1) * half] for c in pair)

    def chunks(self, rank: int, super_epoch: int) -> list[int]:
        """The chunks ``rank`` holds (and whose training nodes it computes the loss of), sorted."""
        return self.group_chunks(self.group(rank, super_epoch), super_epoch)

    def holders(self, super_epoch: int) -> np.ndarray:
        """int64 [C]: the rank that holds each chunk in ``super_epoch``."""
        out = np.empty(self.num_chunks, dtype=np.int64)
        for rank in range(self.world_size):
            out[self.chunks(rank, super_epoch)] = rank
        return out


def super_epoch_of(epoch: int, repart_every: int) -> int:
    """Super-epoch index of ``epoch`` when the chunks rotate every ``repart_every`` epochs."""
    return epoch // repart_every


def num_batches(counts: Sequence[int], batch_size: int) -> int:
    """Local mini-batches per epoch, the same on every rank: enough for the rank with the most
    training nodes (``counts``, one per rank) at ``batch_size`` (0: one batch of everything)."""
    if batch_size <= 0:
        return 1
    return max(1, math.ceil(max(counts, default=0) / batch_size))


def batch_sizes(count: int, batches: int) -> list[int]:
    """Sizes of the ``batches`` near-equal parts of ``count`` rows (as ``torch.tensor_split`` cuts)."""
    return [count // batches + (1 if j < count % batches else 0) for j in range(batches)]


class RowBlock(Protocol):
    """A contiguous range of destination rows [start, end) of a relabelled graph with their in-edges
    (a store's ``LocalPart`` is one; ``graph_block`` makes one from an in-memory Graph)."""

    start: int
    end: int
    rowptr: np.ndarray  # int64 [n_b+1], rebased to 0
    col: np.ndarray  # int32 [e_b], global source ids
    x: np.ndarray  # float32 [n_b, F]
    y: np.ndarray  # int64 [n_b]
    train_mask: np.ndarray  # bool [n_b]
    val_mask: np.ndarray
    test_mask: np.ndarray
    enc: dict[str, np.ndarray]  # encoding arrays [n_b, w] (``dsgraph/graph/encodings/``)
    edge_attr: np.ndarray | None  # float32 [e_b, F_e] (None: no edge features)
    added_loops: np.ndarray | None  # bool [e_b]


@dataclass(kw_only=True)
class GraphBlock:
    """A ``RowBlock`` cut from an in-memory Graph (views of its arrays; only rowptr is rebased, a copy)."""

    start: int
    end: int
    rowptr: np.ndarray
    col: np.ndarray
    x: np.ndarray
    y: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    enc: dict[str, np.ndarray] = field(default_factory=dict)
    edge_attr: np.ndarray | None = None
    added_loops: np.ndarray | None = None


def graph_block(graph: Graph, start: int, end: int) -> GraphBlock:
    """Rows [start, end) of ``graph`` with their in-edges (and their features), node features,
    labels, masks and encodings."""
    rowptr, col = graph.rows(start, end)
    lo, hi = graph.edge_range(start, end)
    edges = {}
    if graph.edge_attr is not None:
        added = graph.added_loops[lo:hi] if graph.added_loops is not None else torch.zeros(hi - lo, dtype=torch.bool)
        edges = {"edge_attr": graph.edge_attr[lo:hi].numpy(), "added_loops": added.numpy()}
    return GraphBlock(
        start=start,
        end=end,
        rowptr=rowptr.numpy(),
        col=col.numpy(),
        x=graph.x[start:end].numpy(),
        y=graph.y[start:end].numpy(),
        train_mask=graph.train_mask[start:end].numpy(),
        val_mask=graph.val_mask[start:end].numpy(),
        test_mask=graph.test_mask[start:end].numpy(),
        enc={name: array[start:end].numpy() for name, array in graph.enc.items()},
        **edges,
    )


class BlockRows:
    """Where the rows of disjoint row blocks sit locally: block b's rows follow blocks 0..b-1."""

    def __init__(self, blocks: Sequence[RowBlock]):
        if not blocks:
            raise ValueError("a local subgraph needs at least one row block")
        self.starts = np.array([b.start for b in blocks], dtype=np.int64)
        self.ends = np.array([b.end for b in blocks], dtype=np.int64)
        sizes = self.ends - self.starts
        self.offsets = np.concatenate(([0], np.cumsum(sizes)))  # [B+1] local id of each block's first row
        self.order = np.argsort(self.starts)
        if (sizes < 0).any() or (self.starts[self.order][1:] < self.ends[self.order][:-1]).any():
            raise ValueError(
                f"row blocks must be disjoint ranges, got {list(zip(self.starts.tolist(), self.ends.tolist()))}"
            )
        self.degree = np.concatenate([np.diff(np.asarray(b.rowptr)) for b in blocks])  # [n] full in-degree
        self.src = np.concatenate([np.asarray(b.col, dtype=np.int64) for b in blocks])  # [E_all] global ids

    @property
    def num_rows(self) -> int:
        return int(self.offsets[-1])

    @functools.cached_property
    def local_src(self) -> np.ndarray:
        """int64 [E_all]: the local row of each in-edge's source, -1 outside the blocks."""
        return self.local(self.src)

    def local(self, ids: np.ndarray) -> np.ndarray:
        """int64: the local row of each global id, -1 where it lies in no block."""
        which = np.searchsorted(self.starts[self.order], ids, side="right") - 1
        block = self.order[np.clip(which, 0, None)]
        inside = (which >= 0) & (ids < self.ends[block])
        return np.where(inside, ids - self.starts[block] + self.offsets[block], -1)

    def node_ids(self) -> np.ndarray:
        return np.concatenate([np.arange(s, e, dtype=np.int64) for s, e in zip(self.starts, self.ends)])


def halo_budget(num_rows: int, fraction: float) -> int:
    """Halo cache capacity in nodes: ``fraction`` of the rank's rows, rounded down."""
    return int(fraction * num_rows)


def select_halo(blocks: Sequence[RowBlock], budget: int) -> np.ndarray:
    """The halo cache of a rank holding ``blocks``: up to ``budget`` source ids outside the blocks,
    those with the most in-edges into the blocks' rows (ties: the smaller id). Sorted int64."""
    return halo_of_rows(BlockRows(blocks), budget)


def halo_of_rows(rows: BlockRows, budget: int) -> np.ndarray:
    """``select_halo`` of blocks whose ``BlockRows`` the caller has built already."""
    outside = rows.src[rows.local_src < 0]
    ids, counts = np.unique(outside, return_counts=True)
    if budget <= 0:
        return ids[:0]
    if ids.size > budget:
        ids = np.sort(ids[np.lexsort((ids, -counts))[:budget]])
    return ids


def _edges(rows: BlockRows, halo_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(dst, src, kept, from_halo) over every in-edge of the blocks' rows: local destination and
    source (halo row h at num_rows + h), whether the edge is in the local subgraph and whether
    its source is a halo row."""
    dst = np.repeat(np.arange(rows.num_rows, dtype=np.int64), rows.degree)
    src = rows.local_src
    from_halo = np.zeros(src.shape, dtype=bool)
    if halo_ids.size:
        order = np.argsort(halo_ids, kind="stable")
        pos = np.clip(np.searchsorted(halo_ids[order], rows.src), 0, halo_ids.size - 1)
        from_halo = (src < 0) & (halo_ids[order][pos] == rows.src)
        src = np.where(from_halo, rows.num_rows + order[pos], src)
    return dst, src, src >= 0, from_halo


@dataclass(kw_only=True)
class LocalSubgraph:
    """A rank's chunks and halo as one graph with local ids: the blocks' rows first (in block
    order), then one row per halo node."""

    graph: Graph
    """Local CSR by destination, features (zeros in halo rows until the halo arrives), labels and
    masks (halo rows unlabelled, in no split)."""
    node_ids: torch.Tensor
    """int64 [n]: the relabelled global id of every local row."""
    num_own: int
    """Rows of the blocks (the rank's chunks); the halo rows follow."""
    degree: np.ndarray
    """int64 [num_own]: in-degree of each own row in the whole graph."""
    kept: np.ndarray
    """int64 [num_own]: its in-edges present locally (source in the blocks or in the halo)."""
    halo_hits: int
    """In-edges of own rows whose source is a halo row (cross-chunk edges the cache keeps)."""
    chunks: tuple[int, ...] = ()

    @property
    def num_edges(self) -> int:
        return self.graph.num_edges

    @property
    def halo_misses(self) -> int:
        """Cross-chunk in-edges of own rows that are not in the local subgraph."""
        return int(self.degree.sum() - self.kept.sum())


def local_subgraph(
    blocks: Sequence[RowBlock],
    halo_ids=(),
    *,
    halo_self_loops: bool = True,
    chunks: Sequence[int] = (),
    rows: BlockRows | None = None,
    halo_enc: dict[str, np.ndarray] | None = None,
) -> LocalSubgraph:
    """Keeps the in-edges of the blocks' rows whose source lies in a block or in ``halo_ids`` (ids
    outside every block, any order: halo row h is ``halo_ids[h]``); a halo row's only in-edge is its
    self loop (with ``halo_self_loops``; an added loop, with edge features). Block row ranges must be
    disjoint; copies out of memmaps. ``rows``: the blocks' ``BlockRows``, where the caller has built
    it already. With ``halo_enc`` (the halo rows' encoding arrays, [h, w] each) the graph carries
    those encodings: the blocks' rows, then the halo rows'. Edge features, where the blocks have
    them, follow the kept edges."""
    rows = BlockRows(blocks) if rows is None else rows
    halo_ids = np.asarray(halo_ids, dtype=np.int64)
    if halo_ids.size and ((rows.local(halo_ids) >= 0).any() or np.unique(halo_ids).size != halo_ids.size):
        raise ValueError("halo ids must be distinct and lie outside the row blocks")
    dst, src, kept_edge, from_halo = _edges(rows, halo_ids)
    n, h = rows.num_rows, halo_ids.size
    kept = np.bincount(dst[kept_edge], minlength=n)
    loops = np.arange(n, n + h, dtype=np.int64) if halo_self_loops else np.zeros(0, dtype=np.int64)
    rowptr = np.zeros(n + h + 1, dtype=np.int64)
    np.cumsum(np.concatenate([kept, np.full(h, int(halo_self_loops))]), out=rowptr[1:])
    col = np.concatenate([src[kept_edge], loops]).astype(np.int32)

    def cat(name: str, dtype, halo_value) -> torch.Tensor:
        own = [np.asarray(getattr(b, name), dtype=dtype) for b in blocks]
        shape = (h, *own[0].shape[1:])
        return torch.from_numpy(np.concatenate(own + [np.full(shape, halo_value, dtype=dtype)]))

    graph = Graph(
        rowptr=torch.from_numpy(rowptr),
        col=torch.from_numpy(col),
        x=cat("x", np.float32, 0.0),
        y=cat("y", np.int64, -1),
        train_mask=cat("train_mask", bool, False),
        val_mask=cat("val_mask", bool, False),
        test_mask=cat("test_mask", bool, False),
        name="isolated",
        enc=_stacked_encodings(blocks, halo_enc),
        **_kept_edge_features(blocks, kept_edge, loops.size),
    )
    node_ids = torch.from_numpy(np.concatenate([rows.node_ids(), halo_ids]))
    return LocalSubgraph(
        graph=graph,
        node_ids=node_ids,
        num_own=n,
        degree=rows.degree,
        kept=kept,
        halo_hits=int(from_halo.sum()),
        chunks=tuple(chunks),
    )


def _kept_edge_features(blocks: Sequence[RowBlock], kept_edge: np.ndarray, loops: int) -> dict:
    """edge_attr and added_loops of a local subgraph: the kept edges' rows, then the halo rows' loops."""
    if getattr(blocks[0], "edge_attr", None) is None:
        return {}
    attr = np.concatenate([np.asarray(b.edge_attr, dtype=np.float32) for b in blocks])[kept_edge]
    added = np.concatenate([np.asarray(b.added_loops, dtype=bool) for b in blocks])[kept_edge]
    return {
        "edge_attr": torch.from_numpy(np.concatenate([attr, np.zeros((loops, attr.shape[1]), np.float32)])),
        "added_loops": torch.from_numpy(np.concatenate([added, np.ones(loops, dtype=bool)])),
    }


def _stacked_encodings(blocks: Sequence[RowBlock], halo_enc: dict[str, np.ndarray] | None) -> dict[str, torch.Tensor]:
    """The encoding arrays of ``halo_enc``'s names: the blocks' rows one after the other, then the
    halo rows' (``halo_enc``, [h, w] each); none without ``halo_enc``."""
    return {
        name: torch.from_numpy(np.concatenate([np.asarray(b.enc[name]) for b in blocks] + [np.asarray(halo)]))
        for name, halo in (halo_enc or {}).items()
    }


@dataclass(kw_only=True)
class CyclePlan:
    """The halo cache of every group of chunks in every round of a rotation cycle, and what every
    node keeps on average over the cycle. A pure function of the graph, so every rank builds the
    same plan and knows, without asking, which of its rows another rank's halo needs."""

    halo: list[list[np.ndarray]]
    """`[round][group]`: the halo ids (sorted) of that group's chunks in that round."""
    degree: np.ndarray
    """int64 [N]: in-degree of every node (relabelled ids)."""
    expected_kept: np.ndarray
    """float64 [N]: in-edges of a node present in its local subgraph, averaged over the cycle."""
    uniform_share: float
    """Share of the training nodes' in-edges kept on average: sum E[kept] / sum degree over them."""

    def halo_of(self, schedule: RotationSchedule, rank: int, super_epoch: int) -> np.ndarray:
        return self.halo[super_epoch % schedule.cycle_length][schedule.group(rank, super_epoch)]


def cycle_plan(parts: Sequence[RowBlock], schedule: RotationSchedule, halo_fraction: float) -> CyclePlan:
    """``parts``: one row block per chunk, in chunk order, covering ids 0..N-1 contiguously."""
    if len(parts) != schedule.num_chunks:
        raise ValueError(f"{len(parts)} chunks for a schedule of {schedule.num_chunks}")
    degree = np.concatenate([np.diff(np.asarray(p.rowptr)) for p in parts])
    train = np.concatenate([np.asarray(p.train_mask, dtype=bool) for p in parts])
    expected = np.zeros(degree.size)
    halo = []
    for t in range(schedule.cycle_length):
        halo.append([])
        for g in range(schedule.world_size):
            blocks = [parts[c] for c in schedule.group_chunks(g, t)]
            rows = BlockRows(blocks)
            ids = halo_of_rows(rows, halo_budget(rows.num_rows, halo_fraction))
            dst, _, kept_edge, _ = _edges(rows, ids)
            expected[rows.node_ids()] += np.bincount(dst[kept_edge], minlength=rows.num_rows)
            halo[-1].append(ids)
    expected /= schedule.cycle_length
    share = float(expected[train].sum() / max(degree[train].sum(), 1))
    return CyclePlan(halo=halo, degree=degree, expected_kept=expected, uniform_share=share if share > 0 else 1.0)


def resampling_correction(expected: np.ndarray, full: np.ndarray) -> np.ndarray:
    """The seed's resampling factor c(v) = 1 / prod_l (E[|N_l(v)|] / |N_l(v)|), float64 [n].

    ``expected`` and ``full`` are [L, n]: the expected size of node v's layer-l neighbourhood in
    the local subgraph, and its size in the whole graph. A node without neighbours gets 1."""
    expected, full = np.asarray(expected, dtype=np.float64), np.asarray(full, dtype=np.float64)
    ratio = np.where(full > 0, expected / np.maximum(full, 1.0), 1.0)
    return 1.0 / np.prod(ratio, axis=0)


def correction_weights(
    method: str, *, degree: np.ndarray, kept: np.ndarray, expected: np.ndarray, layers: int, uniform_share: float
) -> torch.Tensor:
    """Loss weight of each training node in this super-epoch, float32 [n].

    Every layer attends over a node's in-edges, so its layer-l neighbourhood is its in-edges at
    every l: |N_l(v)| = ``degree`` in the whole graph, and E[|N_l(v)|] = ``expected``, its in-edges
    present locally averaged over the rotation cycle. ``kept`` is what it has in this super-epoch.

    - ``resample`` (the seed's): c = 1 / prod_l (E[|N_l|] / |N_l|) = (degree / expected)^L, >= 1 and
      larger for nodes that keep less of their neighbourhood; the same in every super-epoch.
    - ``uniform``: c = uniform_share^-L for every node, as if every node kept the graph's average
      share of its in-edges (a constant: it acts through clipping and the optimizer's epsilon only).
    - ``coverage``: w = kept / expected, the node's share now over its average share; over a cycle a
      node's weights sum to the cycle length (the weights of earlier releases).
    - ``none``: w = 1.
    """
    if method not in CORRECTIONS:
        raise ValueError(f"unknown isolated correction '{method}'; choose from {', '.join(CORRECTIONS)}")
    degree, kept, expected = (np.asarray(a, dtype=np.float64) for a in (degree, kept, expected))
    if method == "resample":
        w = resampling_correction(
            np.broadcast_to(expected, (layers, expected.size)), np.broadcast_to(degree, (layers, degree.size))
        )
    elif method == "uniform":
        w = np.full(degree.size, uniform_share**-layers)
    elif method == "coverage":
        w = np.where(expected > 0, kept / np.maximum(expected, 1e-12), 1.0)
    else:
        w = np.ones(degree.size)
    return torch.from_numpy(w.astype(np.float32))
