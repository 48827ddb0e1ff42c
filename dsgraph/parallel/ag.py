"""GP-AG: rows split over ranks; K and V all-gathered to every rank; dK, dV reduce-scattered back."""

from __future__ import annotations

from contextlib import nullcontext

import torch

from dsgraph.comm import GraphParallelGroup, gather_rows_padded, padded_index
from dsgraph.comm.gather import regathered_in_backward, start_gather_rows_padded
from dsgraph.graph.rank_graph import RankGraph
from dsgraph.ops import sparse_attention
from dsgraph.parallel.spec import CostTerms, GraphAttention, Needs, Strategy, head_groups

ROWPTR_BYTES, INDEX_BYTES = 8, 4


class AllGatherAttention(GraphAttention):
    """K and V of all N nodes gathered to every rank (two collectives, so each arrives as one
    contiguous [P * width, H, D] tensor the kernels read in place); the backward reduce-scatters their
    gradients. Per rank: q, k, v [n, H, D] -> y [n, H, D] over its CSR block, whose sources are
    mapped once into the gathered (padded) layout.

    With ``comm_chunks`` = G > 1 the heads go in G groups: the K/V of group g + 1 travel while
    attention runs on group g (heads are independent, so the result is the same), and backward
    runs one group at a time.

    With ``regather_kv`` the gathered K and V are not kept from forward to backward: backward
    all-gathers them again from the rank's own rows (``regathered_in_backward``), one more
    all-gather of K and V per layer (the forward's bytes again) for a replica that exists only
    while its layer (with head groups: its group) runs forward or backward.

    A score bias [e, H] and edge values [e, C] are the rank's own (its rows' in-edges, block order):
    they move nowhere. Constant scores (q = k = None, ``dsgraph/ops/mean.py``) gather V alone."""

    name = "ag"

    def __init__(self, graph: RankGraph, pg: GraphParallelGroup, ctx):
        self.rowptr, self.col = graph.block.rowptr, padded_index(graph.block.col, pg).to(graph.block.col.dtype)
        self.pg, self.backend, self.codecs = pg, ctx.backend, (ctx.parallel.codec, ctx.parallel.grad_codec)
        self.chunks, self.regather = ctx.parallel.comm_chunks, ctx.parallel.regather_kv and pg.world_size > 1
        self.edges, self.degrees = graph.edges, graph.block.rowptr.diff()

    def _attend(self, q_nHD, k: tuple, v: tuple, bias_eH=None, edge_values=None):
        """Attention of the rank's rows over gathered K and V; ``k``, ``v``: (the rank's rows, gathered),
        k (None, None) for constant scores."""
        pairs = [t[::-1] for t in (k, v) if t[0] is not None]
        hooks = regathered_in_backward(pairs, self.pg, self.codecs[0]) if self.regather else nullcontext()
        with hooks:
            return sparse_attention(
                self.rowptr, self.col, q_nHD, k[1], v[1], bias=bias_eH, edge_values=edge_values, backend=self.backend
            )

    def __call__(self, q_nHD: torch.Tensor, k_nHD: torch.Tensor, v_nHD: torch.Tensor, bias_eH=None, edge_values=None):
        groups = head_groups(v_nHD.shape[1], self.chunks if self.pg.world_size > 1 else 1)
        if len(groups) == 1:
            k_MHD, v_MHD = (None if t is None else gather_rows_padded(t, self.pg, *self.codecs) for t in (k_nHD, v_nHD))
            return self._attend(q_nHD, (k_nHD, k_MHD), (v_nHD, v_MHD), bias_eH, edge_values)

        def start(g):
            return [
                None if t is None else start_gather_rows_padded(t[:, g], self.pg, *self.codecs) for t in (k_nHD, v_nHD)
            ]

        def heads(t, g):
            return None if t is None else t[:, g]

        pending, ys = start(groups[0]), []
        for i, g in enumerate(groups):
            k_MhD, v_MhD = (None if p is None else p.wait() for p in pending)
            if i + 1 < len(groups):
                pending = start(groups[i + 1])  # in flight while this group's attention runs
            ys.append(
                self._attend(
                    heads(q_nHD, g),
                    (heads(k_nHD, g), k_MhD),
                    (v_nHD[:, g], v_MhD),
                    None if bias_eH is None else bias_eH[:, g],
                    edge_values,
                )
            )
        if edge_values is not None:  # (y, z) per group
            return torch.cat([y for y, _ in ys], dim=1), torch.cat([z for _, z in ys], dim=1)
        return torch.cat(ys, dim=1)


def copied_values(rows: int, largest: int, hidden: int, p: int, groups: int = 1) -> float:
    """Values a rank of ``rows`` rows writes per layer besides its kernel and collectives
    (``CostTerms.copied_values``), ``largest`` the most rows of any rank. One rank: none. A rank
    with fewer rows than the largest pads its K and V to them (2 largest zeroed, 2 rows copied).
    With head groups: each group's K and V slices are copied out to be sent (2), the kernel copies
    the strided q slice and its gradients (3), each group's q, k, v slices take full-width
    gradients (3 per group) that are summed (3 per group but one), and the groups' outputs are
    concatenated (1), all of ``rows`` rows."""
    if p == 1:
        return 0.0
    padded = 0 if rows == largest else 2 * rows + 2 * largest
    grouped = (6 * groups + 3) * rows if groups > 1 else 0
    return float((padded + grouped) * hidden)


class AllGather(Strategy):
    name = "ag"
    summary = "all-gather K and V (two collectives per layer); any head count; per-rank K/V replica N x d"
    needs = Needs.ROWS
    edge_values = True

    def build(self, graph, pg, ctx):
        return AllGatherAttention(graph, pg, ctx)

    def cost(self, p, shape, model, dtype_bytes):
        split, n_all = shape.row_split(p), shape.num_nodes
        n, e = split.largest()
        g = len(head_groups(model.heads, model.parallel.comm_chunks))  # head groups gathered one after another
        k = n * model.wire_bytes(
            model.hidden // g, dtype_bytes
        )  # per rank and group: K (and V), padded [n_max, H/g, D]
        dk = n * model.wire_bytes(model.hidden // g, dtype_bytes, gradient=True)
        regather = model.parallel.regather_kv and not model.checkpoint_every  # off under checkpointing, as in training
        # K/V of all N rows kept for backward; one rank gathers nothing (K and V are the projection's own output)
        replica = 0 if regather or p == 1 else n_all * 2 * model.hidden * dtype_bytes
        forward = (("all_gather", k, 2 * g),) if p > 1 else ()
        messages = (*forward, *forward[: int(regather)], ("reduce_scatter", dk, 2 * g)) if p > 1 else ()
        return CostTerms(
            forward_messages=forward,
            forward_hidden=(g - 1) / g,
            forward_bytes=2 * g * k * (p - 1),
            edge_heads=e * model.heads,
            rows=n,
            # the kernel reads K/V of all P (padded) blocks; one call per head group
            attention_sources=p * n,
            attention_heads=model.heads / g if p > 1 else 0.0,
            attention_calls=g if p > 1 else 1,
            messages=messages,
            bytes_sent=2 * g * ((1 + regather) * k + dk) * (p - 1),
            graph_bytes=(n + 1) * ROWPTR_BYTES + (n_all + 1) * ROWPTR_BYTES + 2 * e * INDEX_BYTES + e * ROWPTR_BYTES,
            activation_bytes=replica
            + n * model.heads * 4
            + model.bias_bytes(e, dtype_bytes)
            + model.edge_value_bytes(n, e, dtype_bytes),
            kv_replica_bytes=replica,
            copied_values=max(copied_values(r, n, model.hidden, p, g) for r in split.part_nodes),
            # backward: dK/dV of all N rows, and (P > 1) the buffer that reduce-scatters them
            transient_bytes=(2 if p > 1 else 1) * n_all * 2 * model.hidden * dtype_bytes,
        )
