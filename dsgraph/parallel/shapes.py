"""What AGP's model knows of a graph and of a model: sizes, and how rows split over p ranks."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from dsgraph.comm.allreduce import all_reduce_bytes
from dsgraph.graph.partition import partition_nodes, partition_quality, relabel
from dsgraph.graph.split import contiguous_split
from dsgraph.models.blocks import padded_head_dim
from dsgraph.models.global_attention import sum_values
from dsgraph.models.options import BLOCKS, GLOBAL_ATTENTIONS, HEADS
from dsgraph.parallel.config import ParallelConfig

CONV_PROJECTIONS = {"gcn": 1, "sage": 2}
"""Per block kind that aggregates with constant scores: its projections of a node, each d x d."""


@dataclass(frozen=True, slots=True)
class SplitShape:
    """Rows split into p contiguous ranges: per part its nodes, in-edges, the distinct remote sources
    its rows read (its halo) and the rows of it that other parts read (what a halo exchange sends)."""

    part_nodes: list[int]
    part_edges: list[int]
    halo_sizes: list[int]
    send_sizes: list[int]

    @classmethod
    def from_quality(cls, q) -> SplitShape:
        """From a ``PartitionQuality`` of the split."""
        return cls(list(q.part_nodes), list(q.part_edges), list(q.halo_sizes), list(q.send_sizes))

    @classmethod
    def even(cls, num_nodes: int, num_edges: int, p: int, halo_fraction: float = 0.0) -> SplitShape:
        """A graph known by its sizes only: equal parts, and a halo of ``halo_fraction`` of the
        remote nodes per part (sent as much as received)."""
        n = math.ceil(num_nodes / p)
        halo = int(halo_fraction * (num_nodes - n))
        return cls([n] * p, [math.ceil(num_edges / p)] * p, [halo] * p, [halo] * p)

    def largest(self) -> tuple[int, int]:
        """The most nodes and the most in-edges any part has (each part's memory and work bound)."""
        return max(self.part_nodes), max(self.part_edges)


@dataclass(slots=True)
class GraphShape:
    """What the model needs to know about a graph."""

    num_nodes: int
    num_edges: int
    rows: dict[int, SplitShape] = field(default_factory=dict)
    """Per rank count: the row split that strategies on their own rows (or the whole graph) use.
    Missing: equal parts."""
    partitions: dict[int, SplitShape] = field(default_factory=dict)
    """Per rank count: a partition with few cut edges; strategies that need one are infeasible
    at a p without it."""

    def __post_init__(self) -> None:
        if self.num_nodes < 1 or self.num_edges < 0:
            raise ValueError(
                f"graph shape: need num_nodes >= 1 and num_edges >= 0, got {self.num_nodes}, {self.num_edges}"
            )

    def row_split(self, p: int) -> SplitShape:
        return self.rows.get(p) or SplitShape.even(self.num_nodes, self.num_edges, p)

    @classmethod
    def from_counts(cls, num_nodes: int, num_edges: int, rank_counts, halo_fraction: float | None = None) -> GraphShape:
        """A graph known only by its sizes: even parts, and (when ``halo_fraction`` is given) an
        assumed partition whose parts read ``halo_fraction * (N - N/p)`` remote rows, for
        projections of graphs that are not at hand."""
        shape = cls(int(num_nodes), int(num_edges))
        if halo_fraction is not None:
            if not 0.0 <= halo_fraction <= 1.0:
                raise ValueError(f"halo fraction must be in [0, 1], got {halo_fraction}")
            for p in rank_counts:
                shape.partitions[p] = SplitShape.even(num_nodes, num_edges, p, halo_fraction)
        return shape

    @classmethod
    def from_graph(cls, graph, rank_counts, partition_method: str | None = "metis", seed: int = 0) -> GraphShape:
        """Measures ``graph`` for every p in ``rank_counts``: the default row split, and (when
        ``partition_method`` is given) a partition with that method, relabelled."""
        shape = cls(graph.num_nodes, graph.num_edges)
        for p in rank_counts:
            if p > graph.num_nodes:
                continue
            starts = contiguous_split("balanced", graph.in_degrees(), p).starts
            ranges = [(starts[r], starts[r + 1]) for r in range(p)]
            shape.rows[p] = SplitShape.from_quality(partition_quality(graph, ranges))
            if partition_method is None:
                continue
            parts = partition_nodes(graph, p, partition_method, seed=seed, metis_balance="edges")
            relabelled, _, part_ranges = relabel(graph, parts, p)
            shape.partitions[p] = SplitShape.from_quality(partition_quality(relabelled, part_ranges))
        return shape


@dataclass(frozen=True, slots=True)
class ModelShape:
    """Model sizes: L attention layers of hidden size d with H heads, arranged as the config's
    ``model`` section says (``block``, ``head``, ``input_projection``; ``dsgraph/models/options.py``).
    The defaults here are the Transformer block with a linear classifier."""

    layers: int
    hidden: int
    heads: int
    ffn_mult: int = 2
    in_dim: int = 0
    num_classes: int = 0
    checkpoint_every: int = 0
    """Activation checkpointing of blocks 0, k, 2k, ... (k = checkpoint_every); 0: none."""
    checkpoint_nested: bool = False
    """With checkpointing: a Transformer block keeps only its input, and its backward runs the
    attention sublayer's forward twice (``checkpoint_nested`` in the config)."""
    selective: bool = False
    """Selective recomputation (``selective_recompute`` in the config): a block not checkpointed keeps
    its input, q, k, v, the attention's output (and its fp32 copy) and the global branch's output,
    and recomputes the rest in backward, one region at a time."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """The run's ``parallel`` section (``config.py``): how rows and their gradients travel, head
    groups exchanged one after another while attention runs (``comm_chunks``), GP-AG's
    ``regather_kv`` (off under checkpointing, whose recompute gathers K and V anyway)."""
    block: str = "transformer"
    """'transformer' (attention, W_o, then an FFN), 'attention' (GAT-shaped: q, k, v and an ELU), or
    'gcn' / 'sage' (one projection, two for SAGE's root weight; the same attention kernels with q = k = 0,
    ``dsgraph/models/conv.py``, so the same edge work and bytes)."""
    head: str = "linear"
    """'linear' (a classifier after the last block) or 'attention' (the last attention layer has class
    logits as values: H x pad(C) wide, its own layer kind)."""
    input_projection: bool = True
    """A Linear(in_dim, hidden) before the first block."""
    global_attention: str = "none"
    """'linear': every hidden block also runs linear global attention (its projections, and one
    all-reduce of its per-head sums forward and one backward; ``GlobalAttentionCost``); 'none'."""
    edge_bias: bool = False
    """Every attention layer adds a score bias [E, H] made from edge features (``model.edge_features``):
    kept for backward, and moved where a strategy splits heads (GP-A2A)."""

    edge_values: int = 0
    """C of the edge-conditioned values every attention layer reads (``model.edge_features``
    'bias_value': u [E, C], the F_e edge features and the added-loop flag, C = F_e + 1); 0: none.
    Their z [N, H, C] travels beside y where a strategy splits heads (GP-A2A)."""

    propagation_steps: int = 0
    """APPNP's K (``model.propagation_steps``): K aggregations of the class logits after the output
    layer, each a 'gcn' layer H x pad(ceil(C / H)) wide without weights or checkpointing."""

    @classmethod
    def of_config(cls, cfg, in_dim: int, num_classes: int, edge_dim: int = 0) -> ModelShape:
        """The model's shape for AGP's cost model, from a run's config (``DsgraphConfig``; ``edge_dim``:
        F_e of the graph's edge features)."""
        return cls(
            layers=cfg.layers,
            hidden=cfg.hidden,
            heads=cfg.heads,
            ffn_mult=cfg.ffn_mult,
            in_dim=in_dim,
            num_classes=num_classes,
            checkpoint_every=cfg.checkpoint_every_layers if cfg.checkpoint_activations else 0,
            checkpoint_nested=cfg.checkpoint_nested,
            selective=cfg.selective_recompute,
            block=cfg.model.block,
            head=cfg.model.head,
            input_projection=cfg.model.input_projection,
            global_attention=cfg.model.global_attention,
            parallel=cfg.parallel,
            edge_bias=cfg.model.reads_edges,
            edge_values=edge_dim + 1 if cfg.model.edge_features == "bias_value" else 0,
            propagation_steps=cfg.model.propagation_steps,
        )

    def edge_value_bytes(self, rows: float, edges: float, dtype_bytes: int) -> float:
        """Bytes a layer keeps for edge-conditioned values over ``rows`` rows and their ``edges``
        in-edges: z [rows, H, C] in fp32 and u [edges, C] (0 without them)."""
        return rows * self.heads * self.edge_values * 4 + edges * self.edge_values * dtype_bytes

    def bias_bytes(self, edges: float, dtype_bytes: int) -> float:
        """Bytes of the score bias of ``edges`` edges (0 without one)."""
        return edges * self.heads * dtype_bytes if self.edge_bias else 0.0

    def wire_bytes(self, values_per_row: int, dtype_bytes: int, gradient: bool = False) -> int:
        """Bytes one exchanged row of ``values_per_row`` values takes on the wire, forward or backward."""
        codec = self.parallel.grad_codec if gradient else self.parallel.codec
        return codec.wire_bytes(values_per_row, dtype_bytes)

    def __post_init__(self) -> None:
        if min(self.layers, self.hidden, self.heads, self.ffn_mult) < 1 or self.hidden % self.heads:
            raise ValueError(f"model shape: need positive sizes and hidden divisible by heads, got {self}")
        if self.checkpoint_every < 0:
            raise ValueError(
                f"model shape: checkpoint_every must be >= 0 (0: no checkpointing), got {self.checkpoint_every}"
            )
        if self.block not in BLOCKS or self.head not in HEADS or self.global_attention not in GLOBAL_ATTENTIONS:
            raise ValueError(
                f"model shape: block must be one of {BLOCKS}, head one of {HEADS} and global_attention one of "
                f"{GLOBAL_ATTENTIONS}, got {self}"
            )
        if self.head == "attention" and self.num_classes < 1:
            raise ValueError("model shape: an attention head needs num_classes (its values are class logits)")
        if self.propagation_steps and self.num_classes < 1:
            raise ValueError("model shape: propagation needs num_classes (it aggregates class logits)")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_kinds(self) -> list[LayerKind]:
        """The model's attention layers grouped by kind: the hidden blocks, then (head 'attention') the
        output layer, which attends with H x pad(C) values; each with how many of them checkpointing
        recomputes (blocks 0, k, 2k, ... of all of them, as ``models/checkpointing.py`` picks)."""
        d, k, f = self.hidden, self.checkpoint_every, self.ffn_mult
        hidden = self.layers - (self.head == "attention")

        def checkpointed(first: int, stop: int) -> int:
            return sum(1 for i in range(first, stop) if k and i % k == 0)

        ffn = self.block == "transformer"
        glob = self.global_attention != "none"
        conv = CONV_PROJECTIONS.get(self.block, 0)  # a GCN or SAGE layer's projections per node, in d^2
        macs = d * d * (4 + 2 * f if ffn else conv or 3) + (global_macs_per_node(d, self.head_dim) if glob else 0)
        kinds = [LayerKind(self, hidden, checkpointed(0, hidden), macs, ffn, glob)] if hidden else []
        if self.head == "attention":
            c = padded_head_dim(self.num_classes)
            out = dataclasses.replace(self, hidden=self.heads * c, head="linear", selective=False)  # never recomputed
            out_macs = d * self.num_classes * conv if conv else d * self.heads * (2 * c + self.num_classes)
            kinds.append(LayerKind(out, 1, checkpointed(hidden, self.layers), out_macs, False))
        if self.propagation_steps:
            kinds.append(self._propagation_kind())
        return kinds

    def _propagation_kind(self) -> LayerKind:
        """APPNP's K aggregations of the logits (``models/propagation.py``): 'gcn' layers of the
        padded class width, no projections (their axpy, 2 values a logit, counted as multiply-adds)."""
        width = self.heads * padded_head_dim(-(-self.num_classes // self.heads))
        kw = dict(block="gcn", head="linear", selective=False, global_attention="none", edge_bias=False, edge_values=0)
        prop = dataclasses.replace(self, hidden=width, checkpoint_every=0, propagation_steps=0, **kw)
        return LayerKind(prop, self.propagation_steps, 0, 2 * width, False, weights=False)

    @property
    def num_params(self) -> int:
        d, f, c = self.hidden, self.ffn_mult, self.num_classes
        total = 2 * d  # a final norm
        for kind in filter(lambda kind: kind.weights, self.layer_kinds()):
            local = kind.macs_per_node - kind.global_macs_per_node  # the global branch's sums hold no weights
            per_layer = local + (9 * d + f * d if kind.ffn else kind.shape.hidden * 3)  # weights + biases, norms
            per_layer += 4 * d * d + 4 * d if kind.global_attention else 0  # W_q, W_k, W_v, W_g and their biases
            total += kind.count * per_layer
        if self.input_projection:
            total += self.in_dim * d + d
        if self.head == "linear":
            total += d * c + c
        return total


@dataclass(frozen=True, slots=True)
class LayerKind:
    """Attention layers of one kind, as AGP counts them."""

    shape: ModelShape
    """The sizes the layer runs at (``hidden`` = H x its head dim; the strategies' cost terms take it)."""
    count: int
    checkpointed: int
    """How many of them activation checkpointing recomputes."""
    macs_per_node: int
    """Multiply-adds per node of its projections (QKV, W_o and FFN; the output layer's q, k and logits),
    and of its global branch, if it has one."""
    ffn: bool
    """A Transformer block: an FFN sublayer after the attention (checkpointed per sublayer, or nested)."""
    global_attention: bool = False
    """Each of these layers also runs linear global attention (``GlobalAttentionCost``)."""
    weights: bool = True
    """The layers hold parameters (APPNP's propagation steps hold none)."""

    @property
    def global_macs_per_node(self) -> int:
        """The global branch's share of ``macs_per_node``."""
        return global_macs_per_node(self.shape.hidden, self.shape.head_dim) if self.global_attention else 0

    @property
    def attention_macs_per_node(self) -> int:
        """The attention sublayer's share of ``macs_per_node`` (what a nested recompute runs again)."""
        local = (
            self.shape.hidden * self.shape.hidden * 4 if self.ffn else self.macs_per_node - self.global_macs_per_node
        )
        return local + self.global_macs_per_node

    @property
    def attention_recomputes(self) -> int:
        """Forwards of its attention (and collectives) that checkpointing adds per iteration."""
        return self.checkpointed * (2 if self.ffn and self.shape.checkpoint_nested else 1)


def global_macs_per_node(hidden: int, head_dim: int) -> int:
    """Multiply-adds per node of a global branch (``models/global_attention.py``): its four
    projections (W_q, W_k, W_v, W_g: 4 d^2), the node's terms of the sums S and z and the products
    of phi(q) with them (per head 2 D^2 + 2 D)."""
    return 4 * hidden * hidden + 2 * hidden * (head_dim + 1)


@dataclass(frozen=True, slots=True)
class GlobalAttentionCost:
    """One layer's linear global attention on p ranks, for AGP: the all-reduce of its per-head sums
    (fp32 S [H, D, D] and z [H, D]) forward and of their gradient backward (the branch keeps its sums,
    ``models/global_attention.py``); a block that recomputes its forward in backward (checkpointing,
    selective recomputation) runs the forward's once more (``forward_messages``). The same for every
    strategy: it depends on the model's sizes alone, not on how the rows split. Its messages time a
    ring all-reduce as the profile's collectives do (a reduce-scatter and an all-gather of 1/P of
    the sums each), so single- and multi-tier profiles time it alike."""

    payload_bytes: int
    """Bytes of the sums one all-reduce carries."""
    messages: tuple[tuple[str, float, float], ...]
    """Forward and backward, as ``CostTerms.messages``."""
    forward_messages: tuple[tuple[str, float, float], ...]
    """The forward's share (what a checkpointed layer's recompute runs again)."""
    bytes_sent: int
    """Bytes a rank sends per layer, forward and backward (what ``CommStats`` counts)."""
    forward_bytes: int

    @classmethod
    def of(cls, p: int, model: ModelShape) -> GlobalAttentionCost:
        payload = 4 * sum_values(model.heads, model.head_dim)
        one = (("reduce_scatter", payload / p, 1), ("all_gather", payload / p, 1)) if p > 1 else ()
        twice = tuple((name, size, 2 * times) for name, size, times in one)  # forward and backward
        sent = all_reduce_bytes(payload, p)
        return cls(payload, twice, one, 2 * sent, sent)
