"""GP-Halo: each rank fetches only the K/V rows its own rows read from other ranks (its halo).

Needs a node order in which every rank's rows are one contiguous range of a partition with few cut
edges (METIS): then the halo is a small fraction of the graph, and so is the traffic.
"""

from __future__ import annotations

import torch

from dsgraph.comm import GraphParallelGroup, start_exchange_rows
from dsgraph.comm.halo import HaloPlan
from dsgraph.graph.partition import halo_ids
from dsgraph.ops import sparse_attention
from dsgraph.parallel.spec import CostTerms, GraphAttention, Needs, Strategy

ROWPTR_BYTES, INDEX_BYTES = 8, 4
PLAN = "halo_plan"  # the key of the plan in RankGraph.derived


class HaloAttention(GraphAttention):
    """K and V halo rows travel together (stacked, one uneven all-to-all whose backward is the
    transposed exchange). While they travel, the rank's interior rows (all sources local) are
    computed; then the boundary rows attend over [local rows; halo rows].

    Per rank: q, k, v [n, H, D] -> y [n, H, D]; ``plan`` (send/receive lists, split sizes, remapped
    col) was built by ``Halo.prepare`` and moved to the device with the graph. A score bias [e, H]
    and edge values [e, C] are the rank's own (edges live with their destination's rank): the
    interior and boundary rows take their edges' rows of them. Constant scores (q = k = None,
    ``dsgraph/ops/mean.py``): the halo rows of v travel alone.
    """

    name = "halo"

    def __init__(self, plan: HaloPlan, pg: GraphParallelGroup, ctx, edges=None):
        self.plan, self.pg, self.backend = plan, pg, ctx.backend
        self.codecs = (ctx.parallel.codec, ctx.parallel.grad_codec)
        self.edges = edges

    def __call__(self, q_nHD: torch.Tensor, k_nHD: torch.Tensor, v_nHD: torch.Tensor, bias_eH=None, edge_values=None):
        plan = self.plan

        def take(t, edges):  # the edges' rows of per-edge data (or of q)
            return None if t is None else t.index_select(0, edges)

        def kv(t_m2HD):  # (k, v) of stacked rows; k None for constant scores
            return (None, t_m2HD[:, 0]) if k_nHD is None else (t_m2HD[:, 0], t_m2HD[:, 1])

        kv_n2HD = torch.stack([v_nHD] if k_nHD is None else [k_nHD, v_nHD], dim=1)
        pending = start_exchange_rows(
            kv_n2HD, plan.send_index, plan.send_counts, plan.recv_counts, self.pg, *self.codecs
        )
        y_parts = []
        if plan.interior_rows.numel():  # overlaps the exchange: these rows read local K/V only
            q_iHD = take(q_nHD, plan.interior_rows)
            y_parts.append(
                sparse_attention(
                    plan.interior_rowptr,
                    plan.interior_col,
                    q_iHD,
                    k_nHD,
                    v_nHD,
                    bias=take(bias_eH, plan.interior_edges),
                    edge_values=take(edge_values, plan.interior_edges),
                    backend=self.backend,
                )
            )
        kv_h2HD = pending.wait()
        if plan.boundary_rows.numel():
            kv_m2HD = torch.cat([kv_n2HD, kv_h2HD])  # [n + h, 2 (1: v alone), H, D] in the compact index space
            q_bHD = take(q_nHD, plan.boundary_rows)
            y_parts.append(
                sparse_attention(
                    plan.boundary_rowptr,
                    plan.boundary_col,
                    q_bHD,
                    *kv(kv_m2HD),
                    bias=take(bias_eH, plan.boundary_edges),
                    edge_values=take(edge_values, plan.boundary_edges),
                    backend=self.backend,
                )
            )
        else:  # no halo (h = 0): keep the empty result in the autograd graph so this rank still joins
            empty = kv_h2HD[:, -1]  # the backward all-to-all that returns its sent rows' gradients
            y_parts.append(
                empty if edge_values is None else (empty, empty.new_zeros((0, empty.shape[1], edge_values.shape[1])))
            )
        if edge_values is None:
            return torch.cat(y_parts).index_select(0, plan.row_order)
        return tuple(torch.cat([part[i] for part in y_parts]).index_select(0, plan.row_order) for i in (0, 1))


def copied_values(rows: int, halo: int, sent: int, hidden: int, p: int) -> float:
    """Values a rank of ``rows`` own rows, ``halo`` halo rows and ``sent`` rows sent writes per layer
    besides its kernels and collectives (``CostTerms.copied_values``), in rows of ``hidden`` values:
    K and V stacked (2 rows) and the sent rows gathered (2 sent); q's interior and boundary rows
    and the output's row order gathered (2 rows), the outputs concatenated (rows); own and halo K/V
    concatenated (2 (rows + halo)); the kernel's copies of the strided K and V it reads and of their
    gradients (5 (rows + halo)); in backward, the K and V slices' gradients widened and summed
    (6 (rows + halo)), the gathers' gradients zeroed and scattered back (5 and 5 rows) and q's, k's
    and v's gradient parts summed (5 rows). One rank: 15 rows (no halo, no boundary)."""
    if p == 1:
        return float(15 * rows * hidden)
    return float((33 * rows + 13 * halo + 2 * sent) * hidden)


class Halo(Strategy):
    name = "halo"
    summary = (
        "exchange only the K/V rows other parts read (uneven all-to-all), overlapped with interior rows; "
        "rows follow a partition"
    )
    needs = Needs.PARTITION
    split_method = "metis"
    edge_values = True

    def prepare(self, graph, pg, ctx):
        """The halo plan: every rank's halo ids travel once through the control plane."""
        start, end = pg.rows
        rowptr, col = graph.block.rowptr.numpy(), graph.block.col.numpy()
        own = halo_ids(col, start, end)
        halos = [own] if pg.world_size == 1 else ctx.control_plane().allgather(own)
        graph.derived[PLAN] = HaloPlan.build(rowptr, col, pg.starts, pg.rank, halos)

    def build(self, graph, pg, ctx):
        if PLAN not in graph.derived:
            raise ValueError(f"strategy {self.name}: the graph was not prepared (Strategy.prepare before RankGraph.to)")
        attention = HaloAttention(graph.derived[PLAN], pg, ctx, graph.edges)
        attention.degrees = graph.block.rowptr.diff()
        return attention

    def cost(self, p, shape, model, dtype_bytes):
        split = shape.partitions.get(p)
        if split is None:
            return f"no partition into {p} parts for {self.name}"
        d, b = model.hidden, dtype_bytes
        n, e = split.largest()
        halo = max(split.halo_sizes)
        row, grad_row = model.wire_bytes(2 * d, b), model.wire_bytes(2 * d, b, gradient=True)  # one node's K and V
        messages = (("all_to_all_uneven", halo * row, 1), ("all_to_all_uneven", halo * grad_row, 1)) if p > 1 else ()
        inter = getattr(split, "inter_halo_sizes", None)  # a node-then-rank partition knows its cross-node halo
        if inter is not None and p > 1:
            busiest = split.halo_sizes.index(halo)
            messages = tuple((*m, inter[busiest] * size) for m, size in zip(messages, (row, grad_row)))
        remote = n + halo
        # K/V kept for backward: own rows and halo stacked for the boundary rows; one rank has no boundary and
        # its kernel reads the projection's own K and V
        kept = remote * 2 * d * b if p > 1 else 0
        return CostTerms(
            forward_messages=messages[:1],
            forward_bytes=max(split.send_sizes) * row,
            edge_heads=e * model.heads,
            rows=n,
            attention_sources=remote,  # the kernel reads K/V of its own rows and the halo
            messages=messages,
            bytes_sent=max(s * row + h * grad_row for s, h in zip(split.send_sizes, split.halo_sizes)),
            graph_bytes=(n + 1) * ROWPTR_BYTES + (remote + 1) * ROWPTR_BYTES + 2 * e * INDEX_BYTES,
            activation_bytes=kept + n * model.heads * 4 + model.bias_bytes(e, b) + model.edge_value_bytes(n, e, b),
            halo_bytes=halo * 2 * d * b,
            transient_bytes=(2 if p > 1 else 1) * remote * 2 * d * b,  # dK/dV, and (P > 1) the rows sent back
            copied_values=max(
                copied_values(*sizes, d, p) for sizes in zip(split.part_nodes, split.halo_sizes, split.send_sizes)
            ),
        )
