"""GP-A2A: an all-to-all turns the node split into a head split; each rank runs H/P heads over the
whole graph; a second all-to-all brings y back to the node split."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dsgraph.comm import (
    GraphParallelGroup,
    all_reduce_sum,
    edges_to_heads,
    gather_constant_rows,
    heads_to_nodes,
    nodes_to_heads,
)
from dsgraph.comm.allreduce import all_reduce_bytes
from dsgraph.comm.alltoall import start_heads_to_nodes, start_nodes_to_heads
from dsgraph.graph.rank_graph import RankGraph
from dsgraph.ops import sparse_attention
from dsgraph.parallel.spec import CostTerms, GraphAttention, Needs, Strategy, head_groups

ROWPTR_BYTES, INDEX_BYTES = 8, 4
EDGE_COUNTS = "a2a_edge_counts"  # the key of the ranks' edge counts in RankGraph.derived


@dataclass(frozen=True)
class EdgeCounts:
    """The in-edges of every rank's rows, by which a score bias moves to the head split; read from
    the whole graph's rowptr in ``prepare`` (on the CPU), so ``build`` reads no device data."""

    counts: tuple[int, ...]

    def to(self, device: torch.device) -> EdgeCounts:
        return self  # plain integers


class AllToAllAttention(GraphAttention):
    """q, k, v travel together ([n, H, 3D] -> [N, H/P, 3D], one collective); attention over the
    whole graph's structure for this rank's H/P heads; y returns to [n, H, D]. A score bias moves
    with the heads: [e, H] (the in-edges of the rank's rows) -> [E, H/P] in the whole graph's CSR
    order, one more all-to-all (its gradient comes back the same way in backward).

    Edge values u [e, C] (constants, the same for every head) are needed for every edge of the
    whole graph: they are all-gathered by the ranks' edge counts to [E, C] once and kept
    (``_whole_values``); z [N, H/P, C] returns to [n, H, C] like y, in its own all-to-all (a row
    of z has its own codec scale).

    Constant scores (q = k = None, ``dsgraph/ops/mean.py``): v travels alone ([n, H, D] -> [N, H/P, D])."""

    name = "a2a"

    def __init__(self, graph: RankGraph, pg: GraphParallelGroup, ctx):
        self.rowptr, self.col = graph.whole.rowptr, graph.whole.col
        self.pg, self.backend, self.codecs = pg, ctx.backend, (ctx.parallel.codec, ctx.parallel.grad_codec)
        self.chunks = ctx.parallel.comm_chunks
        self.edges, self.degrees = graph.edges, graph.block.rowptr.diff()
        if EDGE_COUNTS not in graph.derived:
            raise ValueError(f"strategy {self.name}: the graph was not prepared (Strategy.prepare before RankGraph.to)")
        self.edge_counts = list(graph.derived[EDGE_COUNTS].counts)
        self._values: tuple[torch.Tensor, torch.Tensor] | None = None  # (the rank's u as last given, the whole [E, C])

    def _whole_values(self, u_eC: torch.Tensor) -> torch.Tensor:
        """The edge values of every edge of the whole graph [E, C] (CSR order) from the rank's [e, C].
        Gathered once; a later call whose values equal the kept copy on every rank (compared here, one
        all-reduce of a flag so that all ranks agree) reuses them, so a model that hands the same
        edge features to every layer and step moves them once. A changed u is gathered again."""
        if self.pg.world_size == 1:
            return u_eC
        kept = self._values
        like = kept is not None and (kept[0].shape, kept[0].dtype, kept[0].device) == (
            u_eC.shape,
            u_eC.dtype,
            u_eC.device,
        )
        same = like and torch.equal(kept[0], u_eC)
        changed = all_reduce_sum(torch.tensor([0 if same else 1], device=u_eC.device), self.pg)
        if int(changed.item()) == 0:
            return kept[1]
        self._values = (u_eC.detach().clone(), gather_constant_rows(u_eC, self.edge_counts, self.pg))
        return self._values[1]

    def __call__(self, q_nHD: torch.Tensor, k_nHD: torch.Tensor, v_nHD: torch.Tensor, bias_eH=None, edge_values=None):
        constant = q_nHD is None  # constant scores: v alone travels and is attended over
        qkv_nH3D = v_nHD if constant else torch.cat([q_nHD, k_nHD, v_nHD], dim=2)
        p = self.pg.world_size
        groups = head_groups(v_nHD.shape[1] // p, self.chunks if p > 1 else 1)
        bias_Eh = None if bias_eH is None else edges_to_heads(bias_eH, self.edge_counts, self.pg)
        u_EC = None if edge_values is None else self._whole_values(edge_values)
        if len(groups) == 1:
            q_NhD, k_NhD, v_NhD = _split(nodes_to_heads(qkv_nH3D, self.pg, *self.codecs), constant)
            out = sparse_attention(
                self.rowptr, self.col, q_NhD, k_NhD, v_NhD, bias=bias_Eh, edge_values=u_EC, backend=self.backend
            )
            if u_EC is None:
                return heads_to_nodes(out, self.pg, *self.codecs)
            return tuple(heads_to_nodes(t, self.pg, *self.codecs) for t in out)  # (y [n, H, D], z [n, H, C])
        return self._pipelined(qkv_nH3D, groups, bias_Eh, u_EC, constant)

    def _pipelined(self, qkv_nH3D: torch.Tensor, groups: list[slice], bias_Eh=None, u_EC=None, constant=False):
        """Group g of every rank's heads goes to the head split while group g - 1's attention runs,
        and its y (and z) comes back while group g + 1's runs; ``constant``: ``qkv_nH3D`` is v alone."""
        n, heads, dim3 = qkv_nH3D.shape
        p = self.pg.world_size
        qkv_nPh3D = qkv_nH3D.view(n, p, heads // p, dim3)

        def send(g):
            return start_nodes_to_heads(qkv_nPh3D[:, :, g].reshape(n, -1, dim3), self.pg, *self.codecs)

        pending, back = send(groups[0]), []
        for i, g in enumerate(groups):
            q_NgD, k_NgD, v_NgD = _split(pending.wait(), constant)
            if i + 1 < len(groups):
                pending = send(groups[i + 1])
            bias_Eg = None if bias_Eh is None else bias_Eh[:, g]
            out = sparse_attention(
                self.rowptr, self.col, q_NgD, k_NgD, v_NgD, bias=bias_Eg, edge_values=u_EC, backend=self.backend
            )
            back.append([start_heads_to_nodes(t, self.pg, *self.codecs) for t in ((out,) if u_EC is None else out)])
        outs = []
        for j in range(len(back[0])):  # y, then z with edge values: [n, P, |g|, width] per group -> [n, H, width]
            parts = [b[j].wait() for b in back]
            width = parts[0].shape[-1]
            outs.append(
                torch.cat([t.view(n, p, g.stop - g.start, width) for t, g in zip(parts, groups)], dim=2).view(
                    n, heads, width
                )
            )
        return outs[0] if u_EC is None else tuple(outs)


def _split(qkv: torch.Tensor, constant: bool) -> tuple:
    """(q, k, v) of what travelled: [.., 3D] cut in three, or (None, None, v) for constant scores."""
    return (None, None, qkv) if constant else qkv.chunk(3, dim=2)


def copied_values(rows: int, hidden: int, heads: int, p: int, groups: int = 1) -> float:
    """Values a rank of ``rows`` rows (about N / P) writes per layer besides its kernel and
    collectives (``CostTerms.copied_values``), all of ``rows`` x ``hidden`` tensors: q | k | v
    concatenated and their gradients (6); the kernel's copies of the strided head-split q, k, v and
    of their gradients (7); the send layouts of q | k | v and of y's gradient (4), and with more than
    one head per rank the node split of y and of q | k | v's gradient (4; with one head it is a
    view). With head groups: the concatenations and the groups' y concatenated (7), each group's
    slices taking full-width gradients (3 per group) that are summed (3 per group but one), and the
    layout and kernel copies (19; 12 with one head per group). One rank: the concatenations and
    the kernel's copies (13)."""
    if p == 1:
        return float(13 * rows * hidden)
    per_group = heads // p // groups
    if groups == 1:
        units = 17 + (4 if per_group > 1 else 0)
    else:
        units = 7 + 3 * (groups - 1) + 3 * groups + (19 if per_group > 1 else 12)
    return float(units * rows * hidden)


class AllToAll(Strategy):
    name = "a2a"
    summary = "all-to-all to a head split, attention over the whole graph for H/P heads; needs H divisible by the ranks"
    needs = Needs.WHOLE_GRAPH
    edge_values = True
    split_method = "contiguous"  # every rank runs all edges for H/P heads: only node counts matter

    def infeasible(self, heads, world_size):
        if heads % world_size:
            return (
                f"it splits attention heads over ranks, but {heads} heads do not divide over {world_size} ranks; "
                f"use --strategy ag, or a head count divisible by {world_size}"
            )
        return ""

    def prepare(self, graph, pg, ctx):
        """The ranks' edge counts, from the whole structure this rank holds (no exchange)."""
        rowptr, starts = graph.whole.rowptr, torch.tensor(pg.starts, dtype=torch.int64)
        graph.derived[EDGE_COUNTS] = EdgeCounts(tuple((rowptr[starts[1:]] - rowptr[starts[:-1]]).tolist()))

    def build(self, graph, pg, ctx):
        self.check_feasible(ctx.heads, pg.world_size)
        return AllToAllAttention(graph, pg, ctx)

    def cost(self, p, shape, model, dtype_bytes):
        """Per layer. With edge values (``model.edge_values`` C): z [N, H/P, C] returns beside y (and
        dz goes the way back), and one 8-byte all-reduce says whether every rank's u is the one kept;
        u itself is gathered once per run (max(e) x C per rank), not per layer, so it is not here:
        it is kept, [E, C] and the rank's [e, C], in ``graph_bytes``."""
        reason = self.infeasible(model.heads, p)
        if reason:
            return f"H % p != 0: {model.heads} heads do not split over {p} ranks"
        n_all, e_all, d, b = shape.num_nodes, shape.num_edges, model.hidden, dtype_bytes
        split = shape.row_split(p)
        n, e = split.largest()
        fwd = lambda values: model.wire_bytes(values, b)  # noqa: E731 (one row of H/P heads on the wire)
        bwd = lambda values: model.wire_bytes(values, b, gradient=True)  # noqa: E731
        # head groups sent one after another
        g = len(head_groups(model.heads // p, model.parallel.comm_chunks)) if p > 1 else 1
        qkv, y = 3 * d // p // g, d // p // g  # values per exchanged row (a group of H/P heads of q|k|v, of y)
        c = model.edge_values
        z = model.heads * c // p // g  # values per exchanged row of z (0 without edge values)
        flag = 8 if c and p > 1 else 0  # the all-reduce of 'edge values unchanged' (one int64)

        bias = model.bias_bytes(1, b) / p  # one edge's bias for H/P heads (0 without one): it travels as it is

        def sent(
            rows: int, edges: int
        ) -> tuple[float, float]:  # (forward, backward) bytes of a rank with these rows and edges
            if p == 1:
                return 0.0, 0.0
            back = (n_all - rows) * (fwd(y) + (fwd(z) if z else 0))  # y (and z) to the node split
            return (
                g * (rows * (p - 1) * fwd(qkv) + back) + edges * (p - 1) * bias + all_reduce_bytes(flag, p),
                g * (rows * (p - 1) * (bwd(y) + (bwd(z) if z else 0)) + (n_all - rows) * bwd(qkv))
                + (e_all - edges) * bias,
            )

        # the busiest rank; of ranks that send as much, the one whose forward (run again by a recompute) sends the most
        forward, backward = max(
            (sent(r, e) for r, e in zip(split.part_nodes, split.part_edges)), key=lambda fb: (sum(fb), fb[0])
        )
        forward_messages, backward_messages = [], []
        if p > 1:
            forward_messages = [("all_to_all", n * p * fwd(qkv), g), ("all_to_all", n * p * fwd(y), g)]
            backward_messages = [("all_to_all", n * p * bwd(qkv), g), ("all_to_all", n * p * bwd(y), g)]
            if bias:  # the bias to the head split and its gradient back, once per layer
                forward_messages.append(("all_to_all", e * p * bias, 1))
                backward_messages.append(("all_to_all", e * p * bias, 1))
            if z:  # z to the node split, dz back; the agreement on the kept u
                forward_messages += [
                    ("all_to_all", n * p * fwd(z), g),
                    ("reduce_scatter", flag / p, 1),
                    ("all_gather", flag / p, 1),
                ]
                backward_messages.append(("all_to_all", n * p * bwd(z), g))
        return CostTerms(
            forward_messages=tuple(forward_messages),
            forward_hidden=(g - 1) / g,
            forward_bytes=forward,
            edge_heads=e_all * model.heads / p,
            rows=n,
            attention_rows=n_all,
            attention_heads=model.heads / p,
            messages=(*forward_messages, *backward_messages),
            bytes_sent=forward + backward,
            graph_bytes=2 * ((n_all + 1) * ROWPTR_BYTES + e_all * INDEX_BYTES) + (e_all + e) * c * b,
            activation_bytes=n_all * 4 * d / p * b
            + n_all * model.heads / p * (4 + 4 * c)
            + model.bias_bytes(e_all, b) / p,
            kv_replica_bytes=n_all * 2 * d / p * b,  # k and v of all N rows for this rank's H/P heads
            copied_values=copied_values(-(-n_all // p), d, model.heads, p, g),  # its even split of rows
            transient_bytes=2 * n_all * 3 * d / p * b,
        )
