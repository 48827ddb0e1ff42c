"""GP-A2A: an all-to-all turns the node split into a head split; each rank runs H/P heads over the
whole graph; a second all-to-all brings y back to the node split."""

from __future__ import annotations

import torch

from dsgraph.comm import GraphParallelGroup, heads_to_nodes, nodes_to_heads
from dsgraph.graph.rank_graph import RankGraph
from dsgraph.ops import sparse_attention
from dsgraph.parallel.spec import CostTerms, GraphAttention, Needs, Strategy

ROWPTR_BYTES, INDEX_BYTES = 8, 4


class AllToAllAttention(GraphAttention):
    """q, k, v travel together ([n, H, 3D] -> [N, H/P, 3D], one collective); attention over the
    whole graph's structure for this rank's H/P heads; y returns to [n, H, D]."""

    name = "a2a"

    def __init__(self, graph: RankGraph, pg: GraphParallelGroup, backend: str):
        self.rowptr, self.col = graph.whole.rowptr, graph.whole.col
        self.pg, self.backend = pg, backend

    def __call__(self, q_nHD: torch.Tensor, k_nHD: torch.Tensor, v_nHD: torch.Tensor) -> torch.Tensor:
        qkv_nH3D = torch.cat([q_nHD, k_nHD, v_nHD], dim=2)
        q_NhD, k_NhD, v_NhD = nodes_to_heads(qkv_nH3D, self.pg).chunk(3, dim=2)
        y_NhD = sparse_attention(self.rowptr, self.col, q_NhD, k_NhD, v_NhD, backend=self.backend)
        return heads_to_nodes(y_NhD, self.pg)


class AllToAll(Strategy):
    name = "a2a"
    summary = "all-to-all to a head split, attention over the whole graph for H/P heads; needs H divisible by the ranks"
    needs = Needs.WHOLE_GRAPH
    split_method = "contiguous"  # every rank runs all edges for H/P heads: only node counts matter

    def infeasible(self, heads, world_size):
        if heads % world_size:
            return (f"it splits attention heads over ranks, but {heads} heads do not divide over {world_size} ranks; "
                    f"use --strategy ag, or a head count divisible by {world_size}")  # fmt: skip
        return ""

    def build(self, graph, pg, ctx):
        self.check_feasible(ctx.heads, pg.world_size)
        return AllToAllAttention(graph, pg, ctx.backend)

    def cost(self, p, shape, model, dtype_bytes):
        reason = self.infeasible(model.heads, p)
        if reason:
            return f"H % p != 0: {model.heads} heads do not split over {p} ranks"
        n_all, e_all, d, b = shape.num_nodes, shape.num_edges, model.hidden, dtype_bytes
        n = shape.row_split(p).max_nodes
        qkv, y = n * 3 * d * b, n * d * b
        messages = (("all_to_all", qkv, 2), ("all_to_all", y, 2)) if p > 1 else ()
        return CostTerms(
            forward_messages=(("all_to_all", qkv, 1), ("all_to_all", y, 1)) if p > 1 else (),
            forward_bytes=(n * (p - 1) * 3 + (n_all - n) * 1) * d * b / p if p > 1 else 0.0,
            edge_heads=e_all * model.heads / p,
            rows=n,
            messages=messages,
            bytes_sent=((p - 2) * n + n_all) * 4 * d * b / p if p > 1 else 0.0,
            graph_bytes=2 * ((n_all + 1) * ROWPTR_BYTES + e_all * INDEX_BYTES),
            activation_bytes=n_all * 4 * d / p * b + n_all * model.heads / p * 4,
            transient_bytes=2 * n_all * 3 * d / p * b,
        )
