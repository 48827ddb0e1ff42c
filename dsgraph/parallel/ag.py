"""GP-AG: rows split over ranks; K and V all-gathered to every rank; dK, dV reduce-scattered back."""

from __future__ import annotations

import torch

from dsgraph.comm import GraphParallelGroup, gather_rows
from dsgraph.graph.rank_graph import RankGraph
from dsgraph.ops import sparse_attention
from dsgraph.parallel.spec import CostTerms, GraphAttention, Needs, Strategy

ROWPTR_BYTES, INDEX_BYTES = 8, 4


class AllGatherAttention(GraphAttention):
    """K and V of all N nodes gathered in one collective ([n, 2, H, D] -> [N, 2, H, D]); the backward
    reduce-scatters their gradient. Per rank: q, k, v [n, H, D] -> y [n, H, D] over its CSR block."""

    name = "ag"

    def __init__(self, graph: RankGraph, pg: GraphParallelGroup, backend: str):
        self.rowptr, self.col = graph.block.rowptr, graph.block.col
        self.pg, self.backend = pg, backend

    def __call__(self, q_nHD: torch.Tensor, k_nHD: torch.Tensor, v_nHD: torch.Tensor) -> torch.Tensor:
        kv_N2HD = gather_rows(torch.stack([k_nHD, v_nHD], dim=1), self.pg)
        return sparse_attention(self.rowptr, self.col, q_nHD, kv_N2HD[:, 0], kv_N2HD[:, 1], backend=self.backend)


class AllGather(Strategy):
    name = "ag"
    summary = "all-gather K and V (one collective per layer); any head count; per-rank K/V replica N x d"
    needs = Needs.ROWS

    def build(self, graph, pg, ctx):
        return AllGatherAttention(graph, pg, ctx.backend)

    def cost(self, p, shape, model, dtype_bytes):
        split, n_all = shape.row_split(p), shape.num_nodes
        n, e = split.max_nodes, split.max_edges
        kv = n * 2 * model.hidden * dtype_bytes  # per-rank message: the padded [n_max, 2, H, D] block
        messages = (("all_gather", kv, 1), ("reduce_scatter", kv, 1)) if p > 1 else ()
        return CostTerms(
            edge_heads=e * model.heads,
            rows=n,
            messages=messages,
            bytes_sent=2 * kv * (p - 1),
            graph_bytes=(n + 1) * ROWPTR_BYTES + (n_all + 1) * ROWPTR_BYTES + 2 * e * INDEX_BYTES,
            activation_bytes=n_all * 2 * model.hidden * dtype_bytes + n * model.heads * 4,
            transient_bytes=2 * n_all * 2 * model.hidden * dtype_bytes,
        )
