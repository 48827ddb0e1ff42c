"""GP-Halo: each rank fetches only the K/V rows its own rows read from other ranks (its halo).

Needs a node order in which every rank's rows are one contiguous range of a partition with few cut
edges (METIS): then the halo is a small fraction of the graph, and so is the traffic.
"""

from __future__ import annotations

import torch

from dsgraph.comm import GraphParallelGroup, row_starts, start_exchange_rows
from dsgraph.comm.control import ControlPlane, TorchControlPlane
from dsgraph.comm.halo import HaloPlan
from dsgraph.graph.partition import halo_ids
from dsgraph.ops import sparse_attention


class HaloAttention:
    """GP-Halo: K and V halo rows travel together (stacked, one uneven all-to-all whose backward is
    the transposed exchange). While they travel, the rank's interior rows (all sources local) are
    computed; then the boundary rows attend over [local rows; halo rows].

    Per rank: q, k, v [n, H, D] (n = counts[rank]) -> y [n, H, D]; the plan (send/receive lists,
    split sizes, remapped col) is built once here, exchanging halo id lists through ``control``.
    ``graph`` needs only ``num_nodes`` and ``rows(start, end)`` for this rank's range, with global
    source ids, so a memory-mapped part of a partition store serves as well as a whole graph.
    """

    name = "halo"

    def __init__(
        self,
        graph,
        counts: list[int],
        pg: GraphParallelGroup,
        heads: int,
        backend: str = "auto",
        control: ControlPlane | None = None,
    ):
        starts = row_starts(counts)
        start, end = starts[pg.rank], starts[pg.rank + 1]
        rowptr, col = graph.rows(start, end)
        rowptr, col = rowptr.numpy(), col.numpy()
        own = halo_ids(col, start, end)
        if pg.world_size == 1:
            halos = [own]
        else:
            halos = (control or TorchControlPlane()).allgather(own)
        self.plan = HaloPlan.build(rowptr, col, starts, pg.rank, halos)
        self.pg, self.backend = pg, backend
        self._device = torch.device("cpu")

    def __call__(self, q_nHD: torch.Tensor, k_nHD: torch.Tensor, v_nHD: torch.Tensor) -> torch.Tensor:
        if q_nHD.device != self._device:
            self.plan, self._device = self.plan.to(q_nHD.device), q_nHD.device
        plan = self.plan
        kv_n2HD = torch.stack([k_nHD, v_nHD], dim=1)
        pending = start_exchange_rows(kv_n2HD, plan.send_index, plan.send_counts, plan.recv_counts, self.pg)
        y_parts = []
        if plan.interior_rows.numel():  # overlaps the exchange: these rows read local K/V only
            q_iHD = q_nHD.index_select(0, plan.interior_rows)
            y_parts.append(sparse_attention(plan.interior_rowptr, plan.interior_col, q_iHD, k_nHD, v_nHD, backend=self.backend))
        kv_h2HD = pending.wait()
        if plan.boundary_rows.numel():
            kv_m2HD = torch.cat([kv_n2HD, kv_h2HD])  # [n + h, 2, H, D] in the compact index space
            q_bHD = q_nHD.index_select(0, plan.boundary_rows)
            y_parts.append(
                sparse_attention(plan.boundary_rowptr, plan.boundary_col, q_bHD, kv_m2HD[:, 0], kv_m2HD[:, 1], backend=self.backend)
            )
        else:  # no halo (h = 0): keep the empty result in the autograd graph so this rank still joins
            y_parts.append(kv_h2HD[:, 0])  # the backward all-to-all that returns its sent rows' gradients
        return torch.cat(y_parts).index_select(0, plan.row_order)
