"""Placement-aware variants across nodes, costed on paper (no strategy runs them yet).

On P = n x g ranks the two tiers differ by about an order of magnitude per rank (on a DGX H100 a
rank's NVLink carries ~360 GB/s of all-gather bus bandwidth, its NIC ~45 GB/s). GP-A2A's
all-to-alls send (n - 1) / n of their bytes through the NICs, and every rank holds the whole graph.
The variants here keep GP-A2A inside a node (where it is cheap) and move only the K/V rows that
another node's edges read between nodes, over the rail of the rank's head group (rank j of every
node holds the same heads, so nothing crosses rails):

- ``a2a|halo``: the node's rows (a node part of a node-then-rank partition) go from the rank split
  to a head split inside the node (all-to-all of q, k, v and back of y among g ranks); each rank
  then fetches its H/g heads of K and V for the node's halo (the sources on other nodes its node's
  rows read) from rank j of the other nodes (uneven all-to-all over the rail); backward is the
  transposed exchange. Per rank: the node's graph (N/n rows, E/n edges) instead of the whole graph,
  K/V of the node's rows plus its halo for H/g heads.
- ``a2a|ag``: the same inside the node; between nodes, rank j all-gathers its heads' K and V of all
  N rows from rank j of every node (reduce-scatter of their gradients in backward); no partition
  needed, but a K/V replica of N x 2d/g per rank.

Both need H divisible by g and whole nodes. Their cost terms use the ``intra:`` and ``inter:``
collectives of ``tiers.py``; ``predict(..., spec=variant)`` prices them like the strategies.
"""

from __future__ import annotations

from dsgraph.parallel.spec import CostTerms

ROWPTR_BYTES, INDEX_BYTES = 8, 4


class _InNodeA2A:
    """GP-A2A among the g ranks of each node; subclasses say what crosses between nodes."""

    name = ""
    summary = ""

    def __init__(self, ranks_per_node: int):
        self.g = ranks_per_node

    def _reason(self, p, model) -> str:
        g = self.g
        if p <= g or p % g:
            return f"a placement across whole nodes of {g} ranks (p = {2 * g}, {3 * g}, ...)"
        if model.heads % g:
            return f"H % g != 0: {model.heads} heads do not split over the {g} ranks of a node"
        return ""

    def _node(self, p, shape):
        """(rows of the busiest rank, rows and edges of the busiest node, the split used)."""
        split = shape.row_split(p)
        g = self.g
        nodes = [sum(split.part_nodes[k * g : (k + 1) * g]) for k in range(p // g)]
        edges = [sum(split.part_edges[k * g : (k + 1) * g]) for k in range(p // g)]
        return max(split.part_nodes), max(nodes), max(edges), split

    def _in_node(self, n, node_rows, model, b):
        """The intra-node all-to-alls (q|k|v there, y back; forward then backward) and their bytes sent."""
        g, d = self.g, model.hidden
        fwd = lambda values: model.wire_bytes(values, b)  # noqa: E731
        bwd = lambda values: model.wire_bytes(values, b, gradient=True)  # noqa: E731
        qkv, y = 3 * d // g, d // g
        messages = (
            ("intra:all_to_all", n * g * fwd(qkv), 1),
            ("intra:all_to_all", n * g * fwd(y), 1),
            ("intra:all_to_all", n * g * bwd(qkv), 1),
            ("intra:all_to_all", n * g * bwd(y), 1),
        )
        forward = n * (g - 1) * fwd(qkv) + (node_rows - n) * fwd(y)
        backward = n * (g - 1) * bwd(y) + (node_rows - n) * bwd(qkv)
        return messages, forward, backward


class A2AHalo(_InNodeA2A):
    name = "a2a|halo"
    summary = "GP-A2A inside a node, the node's K/V halo between nodes (rail-aligned, H/g heads per rank)"

    def cost(self, p, shape, model, dtype_bytes):
        reason = self._reason(p, model)
        split = shape.partitions.get(p)
        if reason or split is None or not hasattr(split, "node_halo_sizes"):
            return reason or f"no node-then-rank partition into {p} parts for {self.name}"
        g, d, b = self.g, model.hidden, dtype_bytes
        n = max(split.part_nodes)
        node_rows = max(sum(split.part_nodes[k * g : (k + 1) * g]) for k in range(p // g))
        node_edges = max(sum(split.part_edges[k * g : (k + 1) * g]) for k in range(p // g))
        halo = max(split.node_halo_sizes)
        intra, forward, backward = self._in_node(n, node_rows, model, b)
        kv, kv_grad = halo * model.wire_bytes(2 * d // g, b), halo * model.wire_bytes(2 * d // g, b, gradient=True)
        inter = (("inter:all_to_all_uneven", kv, 1), ("inter:all_to_all_uneven", kv_grad, 1))
        sources = node_rows + halo
        return CostTerms(
            forward_messages=(*intra[:2], inter[0]),
            forward_bytes=forward + kv,
            edge_heads=node_edges * model.heads / g,
            rows=n,
            attention_rows=node_rows,
            attention_heads=model.heads / g,
            messages=(*intra, *inter),
            bytes_sent=forward + backward + kv + kv_grad,
            graph_bytes=2 * ((node_rows + 1) * ROWPTR_BYTES + node_edges * INDEX_BYTES) + (sources + 1) * ROWPTR_BYTES,
            activation_bytes=(node_rows * 4 * d / g + halo * 2 * d / g) * b + node_rows * model.heads / g * 4,
            transient_bytes=2 * sources * 3 * d / g * b,
            kv_replica_bytes=node_rows * 2 * d / g * b,
            halo_bytes=halo * 2 * d / g * b,
        )


class A2AAllGather(_InNodeA2A):
    name = "a2a|ag"
    summary = "GP-A2A inside a node, an all-gather of the rank's heads' K/V of all N rows between nodes (rail-aligned)"

    def cost(self, p, shape, model, dtype_bytes):
        reason = self._reason(p, model)
        if reason:
            return reason
        g, d, b, n_all = self.g, model.hidden, dtype_bytes, shape.num_nodes
        n, node_rows, node_edges, _ = self._node(p, shape)
        intra, forward, backward = self._in_node(n, node_rows, model, b)
        kv, kv_grad = (
            node_rows * model.wire_bytes(2 * d // g, b),
            node_rows * model.wire_bytes(2 * d // g, b, gradient=True),
        )
        inter = (("inter:all_gather", kv, 1), ("inter:reduce_scatter", kv_grad, 1))
        nodes = p // g
        return CostTerms(
            forward_messages=(*intra[:2], inter[0]),
            forward_bytes=forward + (nodes - 1) * kv,
            edge_heads=node_edges * model.heads / g,
            rows=n,
            attention_rows=node_rows,
            attention_heads=model.heads / g,
            messages=(*intra, *inter),
            bytes_sent=forward + backward + (nodes - 1) * (kv + kv_grad),
            graph_bytes=2 * ((node_rows + 1) * ROWPTR_BYTES + node_edges * INDEX_BYTES) + (n_all + 1) * ROWPTR_BYTES,
            activation_bytes=(node_rows * 2 * d / g + n_all * 2 * d / g) * b + node_rows * model.heads / g * 4,
            transient_bytes=2 * n_all * 2 * d / g * b,
            kv_replica_bytes=n_all * 2 * d / g * b,
        )


def placement_variants(ranks_per_node: int) -> list:
    """The variants for nodes of ``ranks_per_node`` ranks."""
    return [A2AHalo(ranks_per_node), A2AAllGather(ranks_per_node)]


def predict_variants(graph, model, profile, rank_counts, *, step: bool = True) -> list:
    """Predictions of every variant at every p of ``rank_counts`` that spans whole nodes."""
    from dsgraph.agp.model import predict

    if profile.hierarchy is None:
        return []
    variants = placement_variants(profile.hierarchy.ranks_per_node)
    return [
        predict(v.name, p, graph, model, profile, step=step, spec=v)
        for p in rank_counts
        if p > profile.hierarchy.ranks_per_node
        for v in variants
    ]
