"""Rows of node pairs whose second node may live on another rank: the exchange behind link scores.

A link task scores pairs (u, v) of global rows of the row split. Rank r is responsible for the
pairs whose u it owns; their v may live on any rank. No rank gathers all rows: ``PairRows``
fetches only the distinct v rows that live elsewhere, each once per forward.

1. The plan (``plan_pairs``, built by the first ``table``, inside the forward): the distinct remote
   v, ascending and hence grouped by owner; an all-to-all of their counts and one of their ids tell
   every owner which of its rows to send where (int64: 8 bytes per id, P per count exchange).
2. The rows: ``exchange_rows``, the uneven all-to-all of those rows whose backward sends the
   gradients back along the same routes and sums them into the rows they were sent from; ``table``
   returns this rank's rows and the received ones as one table with the two index vectors of the
   pairs into it (a decoder gathers from it), ``fetch`` the gathered rows themselves.

Per forward a rank sends d x dtype bytes per row another rank asked for, and as much again in
backward; all of it (ids included) is counted in the group's ``stats`` (``comm_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dsgraph.comm.alltoall import _all_to_all, exchange_rows
from dsgraph.comm.group import GraphParallelGroup


@dataclass(frozen=True)
class PairPlan:
    """Where the rows of this rank's pairs come from."""

    u_local: torch.Tensor
    """int64 [m]: u of every pair as an index of this rank's rows."""
    v_compact: torch.Tensor
    """int64 [m]: v of every pair as an index of cat([this rank's rows, the received rows])."""
    send_index: torch.Tensor
    """int64 [s]: this rank's rows that others asked for, grouped by the rank that asked."""
    send_counts: list[int]
    recv_counts: list[int]


def plan_pairs(u_rows: torch.Tensor, v_rows: torch.Tensor, pg: GraphParallelGroup) -> PairPlan:
    """The plan of pairs (u_rows[i], v_rows[i]) of global rows, every u owned by this rank
    (collective: every rank of ``pg`` calls it once for its own pairs)."""
    start, end = pg.rows
    if u_rows.numel() and (int(u_rows.min()) < start or int(u_rows.max()) >= end):
        raise ValueError(f"rank {pg.rank} scores only pairs whose first node is one of its rows [{start}, {end})")
    world = pg.world_size
    remote = (v_rows < start) | (v_rows >= end)
    need = torch.unique(v_rows[remote])  # ascending: grouped by owner
    recv_counts = torch.bincount(owner_of(need, pg), minlength=world)
    if world == 1:
        send_index, send_counts = v_rows.new_zeros(0), [0]
    else:
        asked = _all_to_all(
            recv_counts.to(torch.int64), [1] * world, [1] * world, pg
        )  # what every rank asks of this one
        send_counts = [int(c) for c in asked.tolist()]
        send_index = _all_to_all(need, recv_counts.tolist(), send_counts, pg) - start
    v_compact = torch.where(remote, (end - start) + torch.searchsorted(need, v_rows), v_rows - start)
    return PairPlan(
        u_local=u_rows - start,
        v_compact=v_compact,
        send_index=send_index,
        send_counts=send_counts,
        recv_counts=[int(c) for c in recv_counts.tolist()],
    )


def owner_of(rows: torch.Tensor, pg: GraphParallelGroup) -> torch.Tensor:
    """int64: the rank that owns each global row."""
    return torch.searchsorted(torch.tensor(pg.starts, device=rows.device), rows, right=True) - 1


class PairRows:
    """Pairs (u, v) of global rows this rank scores (it owns every u); ``table(z)`` gives their rows."""

    def __init__(self, u_rows: torch.Tensor, v_rows: torch.Tensor, pg: GraphParallelGroup):
        if u_rows.shape != v_rows.shape or u_rows.ndim != 1:
            raise ValueError(
                f"pairs need u and v of one length [m], got {tuple(u_rows.shape)} and {tuple(v_rows.shape)}"
            )
        self.u_rows, self.v_rows, self.pg = u_rows, v_rows, pg
        self.plan: PairPlan | None = None

    def __len__(self) -> int:
        return int(self.u_rows.numel())

    def table(self, z_nd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """z_nd: this rank's rows [n, d]. Returns (table [n + h, d]: z then the h rows received,
        u_index [m], v_index [m]): pair i's rows are table[u_index[i]] and table[v_index[i]]. The
        backward of ``table`` returns the received rows' gradients to their owners (collective)."""
        if self.plan is None:
            self.plan = plan_pairs(self.u_rows, self.v_rows, self.pg)
        plan = self.plan
        received = exchange_rows(z_nd, plan.send_index, plan.send_counts, plan.recv_counts, self.pg)
        return (
            torch.cat([z_nd, received]),
            plan.u_local,
            plan.v_compact,
        )  # cat even without received rows: every rank's backward joins the exchange

    def fetch(self, z_nd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(z[u], z[v]) [m, d] each, gathered from ``table``."""
        table, u_index, v_index = self.table(z_nd)
        return table.index_select(0, u_index), table.index_select(0, v_index)
