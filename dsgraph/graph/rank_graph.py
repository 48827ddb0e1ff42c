"""What one rank holds of a graph, and the one place that moves it to the training device.

A ``RankGraph`` carries this rank's CSR block (its rows, with global source ids), the whole graph's
structure when its strategy reads every row, the structures a strategy derived from them (a halo
plan), the node data of its rows and, when the model reads edge features, those of the block's
in-edges (edges live with their destination's rank). ``RankGraph.to(device)`` moves all of it together, so nothing
a strategy or backend hands to the op can be left on another device; structures the backends cache
per graph (the transpose, CUDA plans) are then built on that device from the moved tensors.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from dsgraph.graph.graph import CsrSizes


@dataclass(frozen=True, slots=True)
class Csr(CsrSizes):
    """CSR by destination: rowptr int64 [n+1] from 0, col [e] source ids (int32 or int64)."""

    rowptr: torch.Tensor
    col: torch.Tensor

    def to(self, device: torch.device) -> Csr:
        return Csr(self.rowptr.to(device), self.col.to(device))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeData:
    """Features, labels and masks of some rows, and the rows' ids in the dataset's own numbering
    (dropout masks are keyed by them, so results do not depend on partitions or rank counts)."""

    node_ids: torch.Tensor  # int64 [n]
    x: torch.Tensor  # [n, F]
    y: torch.Tensor  # int64 [n] (-1 = unlabelled), float32 [n, T] multi-label, or a regression target (Graph.y)
    train_mask: torch.Tensor  # bool [n]
    val_mask: torch.Tensor
    test_mask: torch.Tensor
    enc: dict[str, torch.Tensor] = field(default_factory=dict)
    """The node encodings the model reads, by array name (``encodings/``): float [n, w] each, and
    'degree' int64 [n, 2] (in, out) of the whole graph."""

    @property
    def num_rows(self) -> int:
        return self.node_ids.numel()

    def to(self, device: torch.device, feature_dtype: torch.dtype | None = None) -> NodeData:
        """Everything on ``device``; features and float encodings in ``feature_dtype``."""

        def cast(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=feature_dtype or t.dtype) if t.is_floating_point() else t.to(device)

        return NodeData(
            node_ids=self.node_ids.to(device),
            x=cast(self.x),
            y=self.y.to(device),
            train_mask=self.train_mask.to(device),
            val_mask=self.val_mask.to(device),
            test_mask=self.test_mask.to(device),
            enc={name: cast(t) for name, t in self.enc.items()},
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class EdgeData:
    """Edge features of a CSR's in-edges, row e for its edge e (col[e]): ``attr`` [e, F_e] and
    ``added_loop`` bool [e], the self loops the model's ``self_loops`` added (their attr rows are 0)."""

    attr: torch.Tensor
    added_loop: torch.Tensor
    _features: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        # built once: every attention layer of every step reads it (``features``)
        object.__setattr__(
            self, "_features", torch.cat([self.attr, self.added_loop[:, None].to(self.attr.dtype)], dim=1)
        )

    @classmethod
    def of(cls, edge_attr: torch.Tensor, added_loops: torch.Tensor | None) -> EdgeData:
        """From a Graph's arrays (no added loops marked: none)."""
        added = added_loops if added_loops is not None else torch.zeros(edge_attr.shape[0], dtype=torch.bool)
        return cls(attr=edge_attr, added_loop=added)

    @property
    def num_features(self) -> int:
        return int(self.attr.shape[1])

    def features(self) -> torch.Tensor:
        """[e, F_e + 1]: the features, then 1 for an added self loop (what the model projects, so
        that an added loop's learned embedding is one row of the projection)."""
        return self._features

    def to(self, device: torch.device, dtype: torch.dtype | None = None) -> EdgeData:
        return EdgeData(
            attr=self.attr.to(device=device, dtype=dtype or self.attr.dtype), added_loop=self.added_loop.to(device)
        )


@dataclass(kw_only=True)
class RankGraph:
    """One rank's share of a graph of ``num_nodes`` nodes (rows split by the process group's
    ``RowSplit``)."""

    num_nodes: int
    block: Csr
    """This rank's rows: rowptr rebased to 0, col with global source ids."""
    nodes: NodeData
    """Node data of this rank's rows."""
    num_features: int
    num_classes: int
    whole: Csr | None = None
    """The whole graph's structure (every row), for strategies that need it."""
    derived: dict[str, Any] = field(default_factory=dict)
    """Structures strategies derived from the graph (``Strategy.prepare``); each has ``.to(device)``."""
    edges: EdgeData | None = None
    """Edge features of the block's in-edges, aligned with ``block.col`` (None: the model reads none)."""

    @property
    def num_edge_features(self) -> int:
        return 0 if self.edges is None else self.edges.num_features

    @property
    def device(self) -> torch.device:
        return self.block.rowptr.device

    def to(self, device: torch.device, feature_dtype: torch.dtype | None = None) -> RankGraph:
        """Everything on ``device``; node and edge features also in ``feature_dtype`` (the model's dtype)."""
        device = torch.device(device)
        block = self.block.to(device)
        whole = block if self.whole is self.block else self.whole.to(device) if self.whole is not None else None
        return dataclasses.replace(
            self,
            block=block,
            whole=whole,
            nodes=self.nodes.to(device, feature_dtype),
            derived={key: value.to(device) for key, value in self.derived.items()},
            edges=None if self.edges is None else self.edges.to(device, feature_dtype),
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor this rank graph holds, by name (the placement tests check them all)."""
        out = {f"block.{f.name}": getattr(self.block, f.name) for f in dataclasses.fields(Csr)}
        out.update(
            {f"nodes.{f.name}": getattr(self.nodes, f.name) for f in dataclasses.fields(NodeData) if f.name != "enc"}
        )
        out.update({f"nodes.enc.{name}": t for name, t in self.nodes.enc.items()})
        if self.whole is not None:
            out.update({f"whole.{f.name}": getattr(self.whole, f.name) for f in dataclasses.fields(Csr)})
        if self.edges is not None:
            out.update({f"edges.{f.name}": getattr(self.edges, f.name) for f in dataclasses.fields(EdgeData)})
        for key, value in self.derived.items():
            fields = dataclasses.fields(value) if dataclasses.is_dataclass(value) else ()
            out.update(
                {
                    f"{key}.{f.name}": getattr(value, f.name)
                    for f in fields
                    if isinstance(getattr(value, f.name), torch.Tensor)
                }
            )
        return out


def whole_graph(graph, feature_dtype: torch.dtype | None = None, edge_features: bool = False) -> RankGraph:
    """A ``Graph`` held whole by one rank (one-rank runs, subgraphs of sampled and isolated steps);
    ``edge_features``: with its edge features (the graph must have them)."""
    n = graph.num_nodes
    nodes = NodeData(
        node_ids=torch.arange(n),
        x=graph.x if feature_dtype is None else graph.x.to(feature_dtype),
        y=graph.y,
        train_mask=graph.train_mask,
        val_mask=graph.val_mask,
        test_mask=graph.test_mask,
        enc=dict(graph.enc),
    )
    csr = Csr(graph.rowptr, graph.col)
    edges = None
    if edge_features:
        edges = EdgeData.of(graph.edge_attr, graph.added_loops)
        edges = edges if feature_dtype is None else edges.to(edges.attr.device, feature_dtype)
    return RankGraph(
        num_nodes=n,
        block=csr,
        whole=csr,
        nodes=nodes,
        num_features=graph.num_features,
        num_classes=graph.num_classes,
        edges=edges,
    )
