"""Graph-parallel attention: a strategy moves q, k, v between ranks; the local op computes.

Each strategy is a callable ``(q_nHD, k_nHD, v_nHD) -> y_nHD`` on the rank's own rows
(node split: n = counts[rank] rows, all H heads), built once per graph. With one rank every
strategy reduces to the plain op on the whole graph.
"""

from __future__ import annotations

import torch

from dsgraph.comm import GraphParallelGroup, gather_rows, heads_to_nodes, nodes_to_heads, row_starts
from dsgraph.graph import Graph
from dsgraph.ops import sparse_attention
from dsgraph.parallel.halo import HaloAttention


class AllGatherAttention:
    """GP-AG: rows split over ranks; K and V all-gathered to [N, H, D] (one collective for both);
    the backward reduce-scatters dK and dV. Per-rank graph memory: the rank's rows only."""

    name = "ag"

    def __init__(self, graph: Graph, counts: list[int], pg: GraphParallelGroup, heads: int, backend: str = "auto"):
        start = row_starts(counts)[pg.rank]
        self.rowptr, self.col = graph.rows(start, start + counts[pg.rank])
        self.counts, self.pg, self.backend = counts, pg, backend

    def __call__(self, q_nHD: torch.Tensor, k_nHD: torch.Tensor, v_nHD: torch.Tensor) -> torch.Tensor:
        kv_N2HD = gather_rows(torch.stack([k_nHD, v_nHD], dim=1), self.counts, self.pg)
        return sparse_attention(self.rowptr, self.col, q_nHD, kv_N2HD[:, 0], kv_N2HD[:, 1], backend=self.backend)


class AllToAllAttention:
    """GP-A2A: an all-to-all turns the node split of q, k, v into a head split [N, H/P, D]
    (one collective for all three), every rank runs attention on the whole graph for its H/P heads,
    and a second all-to-all brings y back to the node split. Needs H divisible by P."""

    name = "a2a"

    def __init__(self, graph: Graph, counts: list[int], pg: GraphParallelGroup, heads: int, backend: str = "auto"):
        if heads % pg.world_size:
            raise ValueError(
                f"strategy a2a splits attention heads over ranks, but {heads} heads do not divide over "
                f"{pg.world_size} ranks; use --strategy ag, or a head count divisible by {pg.world_size}"
            )
        self.rowptr, self.col = graph.rowptr, graph.col
        self.counts, self.pg, self.backend = counts, pg, backend

    def __call__(self, q_nHD: torch.Tensor, k_nHD: torch.Tensor, v_nHD: torch.Tensor) -> torch.Tensor:
        qkv_nH3D = torch.cat([q_nHD, k_nHD, v_nHD], dim=2)
        qkv_Nh3D = nodes_to_heads(qkv_nH3D, self.counts, self.pg)
        q_NhD, k_NhD, v_NhD = qkv_Nh3D.chunk(3, dim=2)
        y_NhD = sparse_attention(self.rowptr, self.col, q_NhD, k_NhD, v_NhD, backend=self.backend)
        return heads_to_nodes(y_NhD, self.counts, self.pg)


STRATEGIES = {"ag": AllGatherAttention, "a2a": AllToAllAttention, "halo": HaloAttention}


def build_strategy(
    name: str, graph: Graph, counts: list[int], pg: GraphParallelGroup, heads: int, backend: str = "auto", control=None
):
    """The attention strategy ``name`` for this rank's rows of ``graph`` (rows split by ``counts``),
    for a model with ``heads`` attention heads. ``control`` (a ControlPlane) carries the halo id
    lists of strategy "halo"; by default torch object collectives."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy '{name}'; choose from {', '.join(STRATEGIES)}")
    if sum(counts) != graph.num_nodes or len(counts) != pg.world_size:
        raise ValueError(f"row counts {counts} do not split {graph.num_nodes} nodes over {pg.world_size} ranks")
    if name == "halo":
        return HaloAttention(graph, counts, pg, heads, backend, control=control)
    return STRATEGIES[name](graph, counts, pg, heads, backend)
