"""Resolves a dataset name to a Graph: 'cora' (bundled), 'rmat:S[:EF]' (synthetic), or a .npz path."""

from __future__ import annotations

import os
from importlib import resources

from dsgraph.graph.graph import Graph
from dsgraph.graph.npz import load_npz
from dsgraph.graph.rmat import rmat_graph

BUNDLED = ("cora",)


def bundled_path(name: str) -> str:
    return str(resources.files("dsgraph.data").joinpath(f"{name}.npz"))


def load_dataset(spec: str, seed: int = 0) -> Graph:
    if spec in BUNDLED:
        return load_npz(bundled_path(spec), name=spec)
    if spec.startswith("rmat:"):
        return rmat_graph(spec, seed=seed)
    if spec.endswith(".npz") or os.path.exists(spec):
        return load_npz(spec)
    raise ValueError(f"dataset '{spec}': expected one of {', '.join(BUNDLED)}, rmat:SCALE[:EDGE_FACTOR] or a path to a .npz file")
