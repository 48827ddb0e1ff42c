"""Reading a user's graph in any supported format into a validated :class:`Graph`.

Formats (detected by :func:`detect_format`): an OGB node-property folder (``ogb``), an edge list
``.txt``/``.csv``/``.tsv``/``.edges``/``.el``, optionally ``.gz`` (``edgelist``), or the project's
``.npz`` (``npz``). Clean-up options (symmetrize, drop self loops, dedup) work on any format; relabel
applies to edge lists, whose ids may be sparse.

Edge lists carry no node data: unless ``features``/``labels`` (.npy files) are given, every node
gets the constant feature 1.0 (x = ones [N, 1]), the label -1 (unlabelled) and empty split masks.

Edge features (an OGB folder's ``raw/edge-feat.csv.gz``, a .npz's ``edge_attr``, an edge list's
columns after the two ids with ``edge_features``) follow their edges through every clean-up: a
reversed edge gets the features of the edge it reverses, and of repeated edges the first keeps its.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import torch

from dsgraph.graph.edgelist import read_edge_list
from dsgraph.graph.edges import CleanupStats, csr_from_keys, dedup_with_origin, edge_keys, edge_keys_with_origin
from dsgraph.graph.encodings import as_tensors, counted, csr_edges
from dsgraph.graph.graph import Graph
from dsgraph.graph.layout import all_splits
from dsgraph.graph.npz import load_npz
from dsgraph.graph.ogb import is_ogb_folder, read_ogb

FORMATS = ("auto", "ogb", "edgelist", "npz")
EDGE_LIST_SUFFIXES = (".txt", ".csv", ".tsv", ".edges", ".el", ".edgelist")
MASKS = ("train_mask", "val_mask", "test_mask")


@dataclass(kw_only=True, slots=True)
class CleanupOptions:
    symmetrize: bool = False  # add v -> u for every u -> v
    drop_self_loops: bool = False  # leave out u -> u
    dedup: bool = False  # keep one copy of repeated edges

    @property
    def any(self) -> bool:
        return self.symmetrize or self.drop_self_loops or self.dedup


@dataclass(kw_only=True, slots=True)
class Ingested:
    """A graph read from disk, with what was done to it on the way."""

    graph: Graph
    format: str
    stats: CleanupStats = field(default_factory=CleanupStats)
    node_ids: np.ndarray | None = None  # int64 [N]: the input's id of each node, when relabelled
    header: str | None = None  # an edge list's skipped header line
    split: str | None = None  # the OGB split scheme used
    all_splits: dict | None = None  # bool [S, N] masks of an .npz input with S fixed splits (``graph`` has split 0)


def detect_format(path: str | os.PathLike) -> str:
    """'ogb', 'edgelist' or 'npz' from the path; ValueError when it is none of them."""
    path = os.fspath(path)
    if os.path.isdir(path):
        if is_ogb_folder(path):
            return "ogb"
        raise ValueError(f"{path}: a folder, but not an OGB node-property folder (no raw/edge.csv.gz)")
    stem = path[:-3] if path.endswith(".gz") else path
    if stem.endswith(".npz"):
        return "npz"
    if stem.lower().endswith(EDGE_LIST_SUFFIXES):
        return "edgelist"
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file or folder")
    raise ValueError(
        f"{path}: unknown input format; expected an OGB folder, a .npz file or an edge list "
        f"({', '.join(EDGE_LIST_SUFFIXES)}, optionally .gz); or pass --format"
    )


def read_graph(
    path: str | os.PathLike,
    *,
    format: str = "auto",
    cleanup: CleanupOptions | None = None,
    relabel: bool = False,
    features: str | None = None,
    labels: str | None = None,
    split: str | None = None,
    name: str | None = None,
    edge_features: bool = False,
) -> Ingested:
    """Reads ``path`` (see the module docstring) and applies ``cleanup``; ``split`` picks an OGB split
    scheme; ``features``/``labels`` are .npy files with one row per node of an edge list;
    ``edge_features``: an edge list's columns after the two node ids are edge features."""
    path = os.fspath(path)
    cleanup = cleanup or CleanupOptions()
    if format not in FORMATS:
        raise ValueError(f"unknown format '{format}'; choose from {', '.join(FORMATS)}")
    fmt = detect_format(path) if format == "auto" else format
    name = name or _default_name(path)
    if fmt != "edgelist" and (relabel or features or labels or edge_features):
        raise ValueError(
            f"{path}: relabel, features, labels and edge feature columns apply to edge lists only "
            f"({fmt} numbers its nodes 0..N-1 and names its edge features)"
        )
    if fmt != "ogb" and split is not None:
        raise ValueError(f"{path}: a split scheme applies to OGB folders only")
    if fmt == "npz":
        return _from_npz(path, cleanup, name)
    if fmt == "ogb":
        data = read_ogb(path, split=split)
        stats = CleanupStats()
        arrays = {"x": data.x, "y": data.y, **data.masks, "edge_attr": data.edge_attr}
        pair = [data.src, data.dst]
        data.src = data.dst = None
        graph = _assemble(pair, data.num_nodes, arrays, cleanup, stats, name, path)
        return Ingested(graph=graph, format=fmt, stats=stats, split=data.split)
    edges = read_edge_list(path, relabel=relabel, edge_features=edge_features)
    n = _node_count(edges.num_nodes, relabel, features, labels)
    if n == 0:
        raise ValueError(f"{path}: the graph is empty (no line holds a SOURCE DESTINATION pair, and no --features)")
    arrays = {**_node_arrays(n, features, labels), "edge_attr": edges.edge_attr}
    pair = [edges.src, edges.dst]
    edges.src = edges.dst = None
    stats = CleanupStats()
    graph = _assemble(pair, n, arrays, cleanup, stats, name, path)
    return Ingested(graph=graph, format=fmt, stats=stats, node_ids=edges.node_ids, header=edges.header)


def _assemble(pair: list, num_nodes, arrays, cleanup, stats, name, source) -> Graph:
    """CSR from the edges ``pair = [src, dst]`` (sorted by destination, then source) plus the node
    arrays and the edge features ``arrays["edge_attr"]`` (None: none), validated. Empties ``pair``
    so that src and dst are released once the keys exist."""
    src, dst = pair
    pair.clear()
    options = dict(symmetrize=cleanup.symmetrize, drop_self_loops=cleanup.drop_self_loops, stats=stats)
    edge_attr = arrays.get("edge_attr")
    if edge_attr is None:
        keys = edge_keys(src, dst, num_nodes, **options)
    else:
        keys, origin = edge_keys_with_origin(src, dst, num_nodes, **options)
        if cleanup.dedup:
            keys, origin = dedup_with_origin(keys, origin, stats)
        edge_attr = torch.from_numpy(np.ascontiguousarray(edge_attr[origin], dtype=np.float32))
    del src, dst
    rowptr, col = csr_from_keys(keys, num_nodes, dedup=cleanup.dedup and edge_attr is None, stats=stats)
    del keys
    graph = Graph(
        rowptr=torch.from_numpy(rowptr),
        col=torch.from_numpy(col),
        x=torch.from_numpy(np.ascontiguousarray(arrays["x"], dtype=np.float32)),
        y=torch.from_numpy(np.ascontiguousarray(arrays["y"], dtype=np.int64)),
        **{m: torch.from_numpy(np.ascontiguousarray(arrays[m], dtype=bool)) for m in MASKS},
        name=name,
        edge_attr=edge_attr,
        enc=as_tensors(counted(csr_edges(rowptr, col), num_nodes)),
    )  # the counted encodings (in/out degrees; encodings/), which a partition store keeps per part
    graph.validate(source)
    return graph


def _from_npz(path: str, cleanup: CleanupOptions, name: str) -> Ingested:
    graph = load_npz(path, name=name)
    stats = CleanupStats(input_edges=graph.num_edges)
    splits = all_splits(path)
    if not cleanup.any:
        return Ingested(graph=graph, format="npz", stats=stats, all_splits=splits)
    stats.input_edges = 0
    n = graph.num_nodes
    pair = [graph.col.numpy(), np.repeat(np.arange(n, dtype=np.int32), graph.in_degrees().numpy())]
    arrays = {
        "x": graph.x.numpy(),
        "y": graph.y.numpy(),
        **{m: getattr(graph, m).numpy() for m in MASKS},
        "edge_attr": None if graph.edge_attr is None else graph.edge_attr.numpy(),
    }
    del graph
    return Ingested(
        graph=_assemble(pair, n, arrays, cleanup, stats, name, path), format="npz", stats=stats, all_splits=splits
    )


def _default_name(path: str) -> str:
    base = os.path.basename(os.path.normpath(path))
    for suffix in (".gz", ".npz", *EDGE_LIST_SUFFIXES):
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
    return base or "graph"


def _load_npy(path: str, what: str) -> np.ndarray:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such {what} file")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable .npy {what} array ({err})") from None


def _node_count(num_nodes: int, relabel: bool, features: str | None, labels: str | None) -> int:
    """N of an edge list: its id range, widened (without relabel) to the rows of features/labels."""
    if relabel:
        return num_nodes
    rows = [len(_load_npy(p, w)) for p, w in ((features, "features"), (labels, "labels")) if p]
    return max([num_nodes, *rows])


def _node_arrays(num_nodes: int, features: str | None, labels: str | None) -> dict[str, np.ndarray]:
    """x, y and masks of an edge list: from the .npy files, else ones [N, 1], -1 and empty masks."""
    x = np.ones((num_nodes, 1), dtype=np.float32)
    y = np.full(num_nodes, -1, dtype=np.int64)
    if features:
        x = _load_npy(features, "features")
        if x.ndim != 2 or x.shape[0] != num_nodes:
            raise ValueError(f"{features}: features must have shape [N, F] with N = {num_nodes} nodes, got {x.shape}")
        if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating) or x.dtype == np.bool_):
            raise ValueError(f"{features}: features must be real numbers, got {x.dtype}")
        x = np.array(x, dtype=np.float32)  # one copy out of the memory map
        bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
        if bad.size:
            raise ValueError(f"{features}: features contain NaN or Inf (first at node {int(bad[0])})")
    if labels:
        y = _load_npy(labels, "labels")
        if y.shape != (num_nodes,) or not np.issubdtype(y.dtype, np.integer):
            raise ValueError(
                f"{labels}: labels must be integers of shape [N] with N = {num_nodes}, got {y.dtype} {y.shape}"
            )
        y = np.array(y, dtype=np.int64)
        if y.size and int(y.min()) < -1:
            node = int(np.argmin(y))
            raise ValueError(
                f"{labels}: node {node} has label {int(y[node])}; labels are class ids >= 0 (-1: unlabelled)"
            )
    return {"x": x, "y": y, **{m: np.zeros(num_nodes, dtype=bool) for m in MASKS}}
