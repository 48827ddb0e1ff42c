"""The halo plan: which K/V rows each rank sends to and receives from every other rank, built once.

Rank r owns the contiguous global rows [starts[r], starts[r+1]) of a relabelled graph and holds the
CSR block of those rows with global source ids. Its halo is the sorted set of remote sources that its
rows read. Given every rank's halo (exchanged once through the control plane), the plan is a pure
function of the inputs and is tested without processes.

Index spaces (n = rows owned, h = halo rows):
- global: node ids of the relabelled graph, [0, N);
- compact: [0, n) are the rank's own rows, [n, n + h) the received halo rows in ``recv_ids`` order.

Rows are also split for overlap: *interior* rows read only local sources (they can be computed while
the halo is in flight), *boundary* rows read at least one halo row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dsgraph.graph.partition import halo_ids


def edge_index_dtype(largest: int) -> type:
    """int32 for indices below 2^31 (half the bytes of int64: the plan holds two per edge), else int64."""
    return np.int32 if largest < 2**31 else np.int64


@dataclass(frozen=True, kw_only=True)
class HaloPlan:
    rank: int
    num_local: int
    """n: rows owned by this rank."""
    recv_ids: torch.Tensor
    """int64 [h]: global ids of the halo rows, ascending, hence grouped by owning rank."""
    recv_counts: list[int]
    """[P]: halo rows received from each rank (0 for this rank)."""
    send_index: torch.Tensor
    """int64 [s]: local row indices sent, grouped by destination rank (ascending within a group)."""
    send_counts: list[int]
    """[P]: rows sent to each rank (0 for this rank)."""
    interior_rows: torch.Tensor
    """int64 [n_i]: local rows whose sources are all local (rows without in-edges included)."""
    interior_rowptr: torch.Tensor
    """int64 [n_i+1] CSR of the interior rows."""
    interior_col: torch.Tensor
    """[e_i]: their sources as local indices in [0, n) (``edge_index_dtype``: int32 below 2^31)."""
    boundary_rows: torch.Tensor
    """int64 [n_b]: local rows with at least one halo source."""
    boundary_rowptr: torch.Tensor
    """int64 [n_b+1] CSR of the boundary rows."""
    boundary_col: torch.Tensor
    """[e_b]: their sources in the compact index space [0, n + h) (int32 below 2^31)."""
    row_order: torch.Tensor
    """int64 [n]: position of each local row in cat([interior rows, boundary rows])."""
    interior_edges: torch.Tensor
    """[e_i]: the block's edge of each interior CSR edge (for per-edge data such as a score bias; int32
    below 2^31 edges)."""
    boundary_edges: torch.Tensor
    """[e_b]: the block's edge of each boundary CSR edge (int32 below 2^31 edges)."""

    @property
    def num_halo(self) -> int:
        return int(self.recv_ids.numel())

    @property
    def rows_sent(self) -> int:
        return int(sum(self.send_counts))

    @classmethod
    def build(
        cls, rowptr: np.ndarray, col: np.ndarray, starts: list[int], rank: int, halos: list[np.ndarray]
    ) -> HaloPlan:
        """``rowptr`` int64 [n+1] (rebased to 0) and ``col`` [e] (global ids) are this rank's CSR block;
        ``starts`` [P+1] the row range boundaries; ``halos[r]`` the ``halo_ids`` of rank r's block."""
        rowptr, col = np.asarray(rowptr, dtype=np.int64), np.asarray(col).astype(np.int64)
        world = len(starts) - 1
        start, end = int(starts[rank]), int(starts[rank + 1])
        n = end - start
        if len(halos) != world:
            raise ValueError(f"halo plan: {len(halos)} halo id lists for {world} ranks")
        if rowptr.shape != (n + 1,) or rowptr[0] != 0 or rowptr[-1] != col.size:
            raise ValueError(f"halo plan: rowptr must have {n + 1} entries from 0 to the block's {col.size} edges")
        own = halo_ids(col, start, end).astype(np.int64)
        if not np.array_equal(own, np.asarray(halos[rank])):
            raise ValueError(f"halo plan: rank {rank}'s halo list does not match its CSR block")

        recv_counts = np.diff(np.searchsorted(own, np.asarray(starts, dtype=np.int64))).tolist()
        send_blocks = []
        for ids in halos:
            ids = np.asarray(ids, dtype=np.int64)
            send_blocks.append(ids[(ids >= start) & (ids < end)] - start)
        send_index = np.concatenate(send_blocks) if send_blocks else np.zeros(0, np.int64)

        local = (col >= start) & (col < end)
        compact = np.where(local, col - start, n + np.searchsorted(own, col))

        degree = np.diff(rowptr)
        edge_row = np.repeat(np.arange(n, dtype=np.int64), degree)  # [e] destination of every edge
        is_boundary = np.bincount(edge_row[~local], minlength=n) > 0  # [n]
        interior, boundary = np.flatnonzero(~is_boundary), np.flatnonzero(is_boundary)
        edge_boundary = is_boundary[edge_row]
        row_order = np.empty(n, dtype=np.int64)
        row_order[np.concatenate([interior, boundary])] = np.arange(n)

        def csr(rows: np.ndarray) -> torch.Tensor:
            out = np.zeros(rows.size + 1, dtype=np.int64)
            np.cumsum(degree[rows], out=out[1:])
            return torch.from_numpy(out)

        t, ids = torch.from_numpy, edge_index_dtype(max(n + own.size, col.size))
        return cls(
            rank=rank,
            num_local=n,
            recv_ids=t(own),
            recv_counts=[int(c) for c in recv_counts],
            send_index=t(send_index.astype(np.int64)),
            send_counts=[int(b.size) for b in send_blocks],
            interior_rows=t(interior.astype(np.int64)),
            interior_rowptr=csr(interior),
            interior_col=t(compact[~edge_boundary].astype(ids)),
            boundary_rows=t(boundary.astype(np.int64)),
            boundary_rowptr=csr(boundary),
            boundary_col=t(compact[edge_boundary].astype(ids)),
            row_order=t(row_order),
            interior_edges=t(np.flatnonzero(~edge_boundary).astype(ids)),
            boundary_edges=t(np.flatnonzero(edge_boundary).astype(ids)),
        )

    def to(self, device: torch.device) -> HaloPlan:
        """The plan with its index tensors on ``device``."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in fields.items()}
        return HaloPlan(**moved)
