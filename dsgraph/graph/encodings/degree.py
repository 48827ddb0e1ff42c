"""The ``degree`` encoding: the dataset's in- and out-degree of every node (array ``degree`` int64
[N, 2]), counted over the edges a graph is built from, as the file stores them (self loops the model
adds are not counted), so every rank, strategy and mode sees the same numbers. Counted when a graph
is read; a partition store keeps it per part, since a rank there never sees the other parts' edges.
The model embeds the in-degree and the out-degree (Graphormer's centrality encoding)."""

from __future__ import annotations

import numpy as np

from dsgraph.graph.encodings.spec import EncodingSpec


class Degree(EncodingSpec):
    name = "degree"
    arrays = ("degree",)
    stored = False
    embeddings = ("in_degree", "out_degree")

    def count(self, src, dst, num_nodes, out=None):
        return degrees(src, dst, num_nodes, out)


def degrees(src: np.ndarray, dst: np.ndarray, num_nodes: int, out: np.ndarray | None = None) -> np.ndarray:
    """int64 [N, 2]: in-degree (column 0) and out-degree (column 1) of every node over the edges
    src -> dst, added to ``out`` when given (for edges read in chunks)."""
    out = np.zeros((num_nodes, 2), dtype=np.int64) if out is None else out
    out[:, 0] += np.bincount(np.asarray(dst, dtype=np.int64), minlength=num_nodes)
    out[:, 1] += np.bincount(np.asarray(src, dtype=np.int64), minlength=num_nodes)
    return out
