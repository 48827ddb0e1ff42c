"""Isolated (Grappa-style) training, the pure part: chunks, the rotation schedule, the local
subgraph of a set of chunks, and the gradient-correction weights. No files, no processes.

Scheme (C chunks, W ranks, C a multiple of W, k = C / W):

- The nodes are split into C chunks (``assign_chunks``) and relabelled so every chunk is one id range.
- Rank r owns the k *primary* chunks ``[r*k, (r+1)*k)`` for the whole run; the loss of a training
  node is computed only by the rank that owns its chunk, so every training node counts exactly once
  per epoch.
- In super-epoch s, rank r also holds one *neighbour* chunk ``((r+1)*k + s mod (C-k)) mod C``: the
  neighbour walks through the C - k chunks owned by other ranks, one per super-epoch.
- Rank r trains on the subgraph induced by its primary chunks plus the neighbour chunk (their own
  edges and the bridging edges between them); the neighbour's rows only feed attention.

Over one rotation cycle of C - k super-epochs every rank has met every chunk, so every in-edge of
every node (its destination is some rank's primary node) was in that rank's training subgraph.
A rank holds (k + 1) / C = 1/W + 1/C of the nodes: more chunks mean less memory and a longer cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import torch

from dsgraph.graph import Graph
from dsgraph.graph.partition import partition_nodes

CHUNK_METHODS = ("random", "metis")
CORRECTIONS = ("coverage", "resample", "uniform", "none")


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
    """Which chunks rank r trains on in super-epoch s (see the module docstring)."""

    num_chunks: int
    world_size: int

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world size must be >= 1, got {self.world_size}")
        if self.num_chunks < self.world_size or self.num_chunks % self.world_size:
            raise ValueError(
                f"isolated training needs a chunk count that is a positive multiple of the {self.world_size} "
                f"ranks, got {self.num_chunks}; set 'isolated_chunks' to e.g. {2 * self.world_size} (or 0 for 2 x ranks)"
            )

    @property
    def chunks_per_rank(self) -> int:
        return self.num_chunks // self.world_size

    @property
    def cycle_length(self) -> int:
        """Super-epochs until the neighbour chunk returns to its first value (1 on one rank)."""
        return max(self.num_chunks - self.chunks_per_rank, 1)

    def primary_chunks(self, rank: int) -> list[int]:
        k = self.chunks_per_rank
        return list(range(rank * k, (rank + 1) * k))

    def neighbour_chunk(self, rank: int, super_epoch: int) -> int | None:
        """The chunk rank ``rank`` borrows in ``super_epoch``; None on one rank (it owns every chunk)."""
        if self.world_size == 1:
            return None
        k = self.chunks_per_rank
        return ((rank + 1) * k + super_epoch % self.cycle_length) % self.num_chunks

    def chunks(self, rank: int, super_epoch: int) -> list[int]:
        """Primary chunks first, then the neighbour chunk."""
        neighbour = self.neighbour_chunk(rank, super_epoch)
        return self.primary_chunks(rank) + ([] if neighbour is None else [neighbour])

    @property
    def expected_coverage(self) -> float:
        """Fraction of a node's in-edges present locally when chunks are uniformly random: (k + 1) / C."""
        return min(self.chunks_per_rank + 1, self.num_chunks) / self.num_chunks


def super_epoch_of(epoch: int, repart_every: int) -> int:
    """Super-epoch index of ``epoch`` when the neighbour chunk rotates every ``repart_every`` epochs."""
    return epoch // repart_every


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


def graph_block(graph: Graph, start: int, end: int) -> GraphBlock:
    """Rows [start, end) of ``graph`` with their in-edges, features, labels and masks."""
    rowptr, col = graph.rows(start, end)
    return GraphBlock(
        start=start, end=end, rowptr=rowptr.numpy(), col=col.numpy(), x=graph.x[start:end].numpy(),
        y=graph.y[start:end].numpy(), train_mask=graph.train_mask[start:end].numpy(),
        val_mask=graph.val_mask[start:end].numpy(), test_mask=graph.test_mask[start:end].numpy(),
    )  # fmt: skip


@dataclass(kw_only=True)
class LocalSubgraph:
    """The subgraph induced by some row blocks, relabelled to local ids 0..n-1 in block order."""

    graph: Graph
    """Local CSR by destination (sources are local ids), features, labels and masks."""
    node_ids: torch.Tensor
    """int64 [n]: the id of each local node in the blocks' (relabelled global) numbering."""
    primary: torch.Tensor
    """bool [n]: rows whose loss this rank owns (the primary blocks)."""
    coverage: torch.Tensor
    """float64 [n]: in-edges present locally / in-edges in the whole graph (1.0 for a row without any)."""
    chunks: tuple[int, ...] = ()
    """The chunk ids of the blocks, primary first."""

    @property
    def num_edges(self) -> int:
        return self.graph.num_edges


def induced_subgraph(blocks: Sequence[RowBlock], num_primary: int, chunks: Sequence[int] = ()) -> LocalSubgraph:
    """Keeps the in-edges of the blocks' rows whose source lies in one of the blocks, relabelled
    to local ids (block b's rows come after blocks 0..b-1). The first ``num_primary`` blocks are primary.

    Block row ranges must be disjoint. Copies out of memory-mapped blocks.
    """
    if not blocks:
        raise ValueError("induced_subgraph needs at least one row block")
    starts = np.array([b.start for b in blocks], dtype=np.int64)
    ends = np.array([b.end for b in blocks], dtype=np.int64)
    sizes = ends - starts
    offsets = np.concatenate(([0], np.cumsum(sizes)))  # [B+1] local id of each block's first row
    order = np.argsort(starts)
    if (sizes < 0).any() or (starts[order][1:] < ends[order][:-1]).any():
        raise ValueError(f"row blocks must be disjoint ranges, got {list(zip(starts.tolist(), ends.tolist()))}")

    degree = np.concatenate([np.diff(np.asarray(b.rowptr)) for b in blocks])  # [n] full in-degree
    src = np.concatenate([np.asarray(b.col, dtype=np.int64) for b in blocks])  # [E_all] global ids
    dst = np.repeat(np.arange(offsets[-1], dtype=np.int64), degree)  # [E_all] local ids
    which = np.searchsorted(starts[order], src, side="right") - 1  # index into the sorted blocks
    inside = which >= 0
    which = order[np.clip(which, 0, None)]  # block index of each source (valid where inside)
    inside &= src < ends[which]
    local_src = (src - starts[which] + offsets[which])[inside]
    kept = np.bincount(dst[inside], minlength=offsets[-1])  # [n] in-edges present locally
    rowptr = np.zeros(offsets[-1] + 1, dtype=np.int64)
    np.cumsum(kept, out=rowptr[1:])
    coverage = np.where(degree > 0, kept / np.maximum(degree, 1), 1.0)

    def cat(name: str, dtype=None) -> torch.Tensor:
        return torch.from_numpy(np.concatenate([np.asarray(getattr(b, name), dtype=dtype) for b in blocks]))

    graph = Graph(
        rowptr=torch.from_numpy(rowptr),
        col=torch.from_numpy(local_src.astype(np.int32)),
        x=cat("x", np.float32),
        y=cat("y", np.int64),
        train_mask=cat("train_mask", bool),
        val_mask=cat("val_mask", bool),
        test_mask=cat("test_mask", bool),
        name="isolated",
    )
    primary = torch.zeros(int(offsets[-1]), dtype=torch.bool)
    primary[: int(offsets[min(num_primary, len(blocks))])] = True
    node_ids = torch.from_numpy(np.concatenate([np.arange(s, e, dtype=np.int64) for s, e in zip(starts, ends)]))
    return LocalSubgraph(graph=graph, node_ids=node_ids, primary=primary, coverage=torch.from_numpy(coverage),
                         chunks=tuple(chunks))



def cycle_coverage(blocks: Sequence[RowBlock], chunk_ranges: np.ndarray, schedule: RotationSchedule, rank: int) -> np.ndarray:
    """Coverage of ``rank``'s primary rows (``blocks``, its primary chunks in order) in every
    super-epoch of the rotation cycle: float64 [cycle_length, n], 1.0 for rows without in-edges.

    ``chunk_ranges`` int64 [C, 2] holds each chunk's relabelled id range (contiguous, in chunk order).
    An in-edge is present when its source lies in a primary chunk or in that super-epoch's neighbour.
    """
    chunk_ranges = np.asarray(chunk_ranges, dtype=np.int64).reshape(-1, 2)
    if chunk_ranges.shape[0] != schedule.num_chunks:
        raise ValueError(f"{chunk_ranges.shape[0]} chunk ranges for a schedule of {schedule.num_chunks} chunks")
    degree = np.concatenate([np.diff(np.asarray(b.rowptr)) for b in blocks])  # [n]
    src = np.concatenate([np.asarray(b.col, dtype=np.int64) for b in blocks])  # [E]
    dst = np.repeat(np.arange(degree.size, dtype=np.int64), degree)  # [E]
    src_chunk = np.searchsorted(chunk_ranges[:, 1], src, side="right")  # [E] chunk of each source
    own = (src_chunk // schedule.chunks_per_rank) == rank  # [E]
    base = np.bincount(dst[own], minlength=degree.size)  # [n] in-edges from the primary chunks
    per_chunk = np.zeros((schedule.num_chunks, degree.size), dtype=np.int64)  # [C, n] the other in-edges
    np.add.at(per_chunk, (src_chunk[~own], dst[~own]), 1)
    out = np.empty((schedule.cycle_length, degree.size))
    for s in range(schedule.cycle_length):
        neighbour = schedule.neighbour_chunk(rank, s)
        present = base + (per_chunk[neighbour] if neighbour is not None else 0)
        out[s] = np.where(degree > 0, present / np.maximum(degree, 1), 1.0)
    return out


def correction_weights(
    coverage: torch.Tensor, cycle: torch.Tensor, method: str, layers: int, expected_coverage: float
) -> torch.Tensor:
    """Loss weight of each of this rank's training nodes in this super-epoch, float32 [n].

    ``coverage`` [n] is each node's fraction f of in-edges present in the local subgraph now;
    ``cycle`` [S, n] the same fraction in every super-epoch of the rotation cycle (``cycle_coverage``).

    - ``coverage``: w = f / mean_cycle(f). Over a cycle every node keeps its full-graph weight (the
      weights of a node sum to the cycle length), but the super-epochs in which it sees more of its
      neighbourhood, where its gradient is closer to the full-graph one, count more.
    - ``resample``: w = f^L / mean_cycle(f^L), Grappa's resampling ratio: with L attention layers
      about f^L of a node's L-hop paths survive the isolation.
    - ``uniform``: w = 1 / ``expected_coverage`` for every node, the inverse inclusion probability of
      an in-edge under uniformly random chunks ((k + 1) / C): a constant scale, which acts through
      gradient clipping and the optimizer's epsilon only.
    - ``none``: w = 1.

    Every weight uses only this rank's own rows, so no rank needs another rank's numbers.
    """
    if method not in CORRECTIONS:
        raise ValueError(f"unknown isolated correction '{method}'; choose from {', '.join(CORRECTIONS)}")
    f = coverage.to(torch.float64)
    if method == "none":
        w = torch.ones_like(f)
    elif method == "uniform":
        w = torch.full_like(f, 1.0 / expected_coverage)
    else:
        power = 1 if method == "coverage" else layers
        w = f.pow(power) / cycle.to(torch.float64).pow(power).mean(0).clamp_min(1e-12)
    return w.to(torch.float32)
