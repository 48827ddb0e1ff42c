"""This rank's share of the graph: its contiguous node rows, their features, labels and masks."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dsgraph.comm import GraphParallelGroup, even_row_counts, row_starts
from dsgraph.graph import Graph


@dataclass
class LocalNodes:
    counts: list[int]  # rows per rank
    start: int  # first global row of this rank
    node_ids: torch.Tensor  # int64 [n] global ids
    x: torch.Tensor  # [n, F]
    y: torch.Tensor  # int64 [n]
    train_mask: torch.Tensor  # bool [n]
    val_mask: torch.Tensor
    test_mask: torch.Tensor

    @classmethod
    def split(cls, graph: Graph, pg: GraphParallelGroup, counts: list[int] | None = None) -> "LocalNodes":
        counts = counts or even_row_counts(graph.num_nodes, pg.world_size)
        start = row_starts(counts)[pg.rank]
        end = start + counts[pg.rank]
        return cls(
            counts=counts,
            start=start,
            node_ids=torch.arange(start, end),
            x=graph.x[start:end],
            y=graph.y[start:end],
            train_mask=graph.train_mask[start:end],
            val_mask=graph.val_mask[start:end],
            test_mask=graph.test_mask[start:end],
        )

    def to(self, device: torch.device, feature_dtype: torch.dtype) -> "LocalNodes":
        return LocalNodes(
            counts=self.counts,
            start=self.start,
            node_ids=self.node_ids.to(device),
            x=self.x.to(device=device, dtype=feature_dtype),
            y=self.y.to(device),
            train_mask=self.train_mask.to(device),
            val_mask=self.val_mask.to(device),
            test_mask=self.test_mask.to(device),
        )
