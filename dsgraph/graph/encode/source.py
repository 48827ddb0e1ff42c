"""What ``dsgraph encode`` reads and writes: a dataset ``.npz`` (bundled, synthetic in the cache,
or a path) or a partition store, and its graph as an ``Adjacency``."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from dsgraph.graph import layout
from dsgraph.graph.datasets import BUNDLED, cached_dataset
from dsgraph.graph.encode.adjacency import Adjacency, from_chunks, from_edges
from dsgraph.graph.rank_reader import DatasetFile
from dsgraph.graph.store import META_FILE, load_part, load_permutation, read_meta


@dataclass(frozen=True, slots=True)
class Target:
    """``kind`` 'npz' (``path`` the file read, ``out`` the file written) or 'store' (both the folder)."""

    kind: str
    path: str
    out: str


def resolve(graph: str, out: str | None, seed: int = 0) -> Target:
    """The target of ``dsgraph encode GRAPH [--out OUT]``: a folder with META.json is a partition
    store (written in place); a dataset spec resolves to its .npz (a synthetic one is generated into
    the cache first), written in place unless ``out`` names a copy; the bundled datasets need ``out``."""
    if os.path.isdir(graph):
        if not os.path.isfile(os.path.join(graph, META_FILE)):
            raise FileNotFoundError(f"{graph}: a folder, but not a partition store (no {META_FILE})")
        if out is not None:
            raise ValueError(f"{graph}: a partition store gets its encodings in place; drop --out")
        return Target("store", graph, graph)
    if graph in BUNDLED and out is None:
        raise ValueError(
            f"'{graph}' is bundled with dsgraph and is not changed in place; pass --out {graph}_enc.npz "
            f"and train on that file"
        )
    path = cached_dataset(graph, seed)
    return Target("npz", path, out or path)


def read_adjacency(target: Target) -> Adjacency:
    """The target's edges (and, for a store, the dataset ids of its relabelled nodes)."""
    if target.kind == "store":
        return _store_adjacency(target.path)
    data = DatasetFile(target.path)
    return from_chunks(data.chunks(), data.num_nodes, layout.edge_count(data.arrays))


def _store_adjacency(store_dir: str) -> Adjacency:
    meta = read_meta(store_dir)
    srcs, dsts = [], []
    for rank in range(int(meta["num_parts"])):
        part = load_part(store_dir, rank, int(meta["num_parts"]))
        srcs.append(np.asarray(part.col, dtype=np.int32))
        dsts.append(np.repeat(np.arange(part.start, part.end, dtype=np.int32), np.diff(np.asarray(part.rowptr))))
    src, dst = np.concatenate(srcs), np.concatenate(dsts)
    del srcs, dsts
    return from_edges(src, dst, int(meta["num_nodes"]), node_keys=np.asarray(load_permutation(store_dir)))
