"""What AGP's model knows of a graph and of a model: sizes, and how rows split over p ranks."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SplitShape:
    """Rows split into p contiguous ranges: per part its nodes, in-edges, the distinct remote sources
    its rows read (its halo) and the rows of it that other parts read (what a halo exchange sends)."""

    part_nodes: list[int]
    part_edges: list[int]
    halo_sizes: list[int]
    send_sizes: list[int]

    @classmethod
    def from_quality(cls, q) -> "SplitShape":
        """From a ``PartitionQuality`` of the split."""
        return cls(list(q.part_nodes), list(q.part_edges), list(q.halo_sizes), list(q.send_sizes))

    @classmethod
    def even(cls, num_nodes: int, num_edges: int, p: int, halo_fraction: float = 0.0) -> "SplitShape":
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
            raise ValueError(f"graph shape: need num_nodes >= 1 and num_edges >= 0, got {self.num_nodes}, {self.num_edges}")

    def row_split(self, p: int) -> SplitShape:
        return self.rows.get(p) or SplitShape.even(self.num_nodes, self.num_edges, p)

    @classmethod
    def from_counts(cls, num_nodes: int, num_edges: int, rank_counts, halo_fraction: float | None = None) -> "GraphShape":
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
    def from_graph(cls, graph, rank_counts, partition_method: str | None = "metis", seed: int = 0) -> "GraphShape":
        """Measures ``graph`` for every p in ``rank_counts``: the default row split, and (when
        ``partition_method`` is given) a partition with that method, relabelled."""
        from dsgraph.graph.partition import partition_nodes, partition_quality, relabel
        from dsgraph.graph.split import contiguous_split

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
    """Model sizes: L layers of hidden size d with H heads and an FFN of ffn_mult * d."""

    layers: int
    hidden: int
    heads: int
    ffn_mult: int = 2
    in_dim: int = 0
    num_classes: int = 0
    checkpoint_every: int = 0
    """Activation checkpointing of blocks 0, k, 2k, ... (k = checkpoint_every); 0: none."""
    checkpoint_nested: bool = False
    """With checkpointing: a block keeps only its input, and its backward runs the attention
    sublayer's forward twice (``checkpoint_nested`` in the config)."""
    comm_dtype: str = "none"
    """How activation rows travel between ranks ('none', 'bf16', 'int8'; see comm/compress.py)."""
    comm_grad_dtype: str = "none"
    """How their gradients travel."""
    comm_chunks: int = 1
    """Head groups exchanged one after another while attention runs (``comm_chunks`` in the config)."""

    def wire_bytes(self, values_per_row: int, dtype_bytes: int, gradient: bool = False) -> int:
        """Bytes one exchanged row of ``values_per_row`` values takes on the wire, forward or backward."""
        from dsgraph.comm.compress import get_codec

        return get_codec(self.comm_grad_dtype if gradient else self.comm_dtype).wire_bytes(values_per_row, dtype_bytes)

    def __post_init__(self) -> None:
        if min(self.layers, self.hidden, self.heads, self.ffn_mult) < 1 or self.hidden % self.heads:
            raise ValueError(f"model shape: need positive sizes and hidden divisible by heads, got {self}")
        if self.checkpoint_every < 0:
            raise ValueError(f"model shape: checkpoint_every must be >= 0 (0: no checkpointing), got {self.checkpoint_every}")

    @property
    def checkpointed_layers(self) -> int:
        return -(-self.layers // self.checkpoint_every) if self.checkpoint_every else 0

    @property
    def attention_recomputes(self) -> int:
        """Forwards of an attention sublayer (and its collectives) that checkpointing adds per iteration."""
        return self.checkpointed_layers * (2 if self.checkpoint_nested else 1)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def layer_macs_per_node(self) -> int:
        """Multiply-adds per node of the QKV, output and FFN projections of one layer."""
        return self.attention_macs_per_node + self.hidden * self.hidden * 2 * self.ffn_mult

    @property
    def attention_macs_per_node(self) -> int:
        """Multiply-adds per node of the attention sublayer's QKV and output projections."""
        return self.hidden * self.hidden * 4

    @property
    def num_params(self) -> int:
        d, f = self.hidden, self.ffn_mult
        per_layer = 4 * d * d + 2 * f * d * d + (3 * d + d + f * d + d) + 4 * d
        return self.layers * per_layer + self.in_dim * d + d + d * self.num_classes + self.num_classes + 2 * d
