"""Resolves a dataset name to a Graph: 'cora' (bundled), 'rmat:S[:EF]' (synthetic), or a .npz path;
or to the .npz file that holds it, for readers that take only their rows (``rank_reader.py``).

Synthetic graphs become files in the cache folder (``$DSGRAPH_CACHE``, default ~/.cache/dsgraph),
written once and renamed into place, so later runs read rows instead of generating the graph again.
"""

from __future__ import annotations

import os
from importlib import resources

from dsgraph.graph.graph import Graph
from dsgraph.graph.label_checks import SplitChoice
from dsgraph.graph.npz import load_npz, save_npz
from dsgraph.graph.rmat import (
    GENERATOR_VERSION,
    parse_rmat_spec,
    rmat_edge_types,
    rmat_graph,
    rmat_labels,
    rmat_regression,
    rmat_structural,
)

BUNDLED = ("cora",)


def bundled_path(name: str) -> str:
    return str(resources.files("dsgraph.data").joinpath(f"{name}.npz"))


def load_dataset(spec: str, seed: int = 0, choice: SplitChoice | None = None) -> Graph:
    """The whole dataset; ``choice``: which of a file's fixed splits, and whether they may overlap."""
    if spec in BUNDLED:
        return load_npz(bundled_path(spec), name=spec, choice=choice)
    if spec.startswith("rmat:"):  # the cached file when there is one: it may hold encodings (`dsgraph encode`)
        path, exists = dataset_file(spec, seed)
        return load_npz(path, name=spec, choice=choice) if exists else rmat_graph(spec, seed=seed)
    if spec.endswith(".npz") or os.path.exists(spec):
        return load_npz(spec, choice=choice)
    raise _unknown(spec)


def _unknown(spec: str) -> ValueError:
    return ValueError(
        f"dataset '{spec}': expected one of {', '.join(BUNDLED)}, "
        "rmat:SCALE[:EDGE_FACTOR][:labels=T|:edge_types=T|:structural|:regression] or a path to a .npz file"
    )


def cache_dir() -> str:
    return os.environ.get("DSGRAPH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "dsgraph")


def dataset_file(spec: str, seed: int = 0) -> tuple[str, bool]:
    """(the .npz that holds dataset ``spec``, whether it exists). Synthetic graphs live in the cache
    under a name with their parameters, seed and generator version (``write_synthetic`` makes it)."""
    if spec in BUNDLED:
        return bundled_path(spec), True
    if spec.startswith("rmat:"):
        scale, edge_factor = parse_rmat_spec(spec)
        labels = f"_labels{rmat_labels(spec)}" if rmat_labels(spec) else "_structural" if rmat_structural(spec) else ""
        labels += f"_etypes{rmat_edge_types(spec)}" if rmat_edge_types(spec) else ""
        labels += "_regression" if rmat_regression(spec) else ""
        path = os.path.join(cache_dir(), f"rmat_s{scale}_ef{edge_factor}{labels}_seed{seed}_v{GENERATOR_VERSION}.npz")
        return path, os.path.isfile(path)
    if spec.endswith(".npz") or os.path.exists(spec):
        if not os.path.isfile(spec):
            raise FileNotFoundError(f"{spec}: no such dataset file")
        return spec, True
    raise _unknown(spec)


def cached_dataset(spec: str, seed: int = 0) -> str:
    """The .npz of ``spec`` (``dataset_file``), a synthetic graph generated into the cache first if
    it is not there yet; for one process (a job's ranks go through ``graph/file_loading.py``)."""
    path, exists = dataset_file(spec, seed)
    if not exists:
        write_synthetic(spec, seed, path)
    return path


def write_synthetic(spec: str, seed: int, path: str) -> None:
    """Generates ``spec`` and writes it to ``path`` (uncompressed, so readers can memory-map it),
    under a temporary name renamed at the end: a reader never sees half a file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp.npz"
    save_npz(rmat_graph(spec, seed=seed), tmp)
    os.replace(tmp, path)
