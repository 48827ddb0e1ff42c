"""Converting between :class:`Graph` and DGL's ``DGLGraph`` or PyG's ``Data``.

Both libraries are optional (``pip install dsgraph[dgl]`` / ``dsgraph[pyg]``) and imported only
inside these functions; dsgraph's core never imports them. Conventions:

- An edge u -> v (DGL ``g.edges()`` = (u, v); PyG ``edge_index[:, e]`` = (u, v), the default
  ``flow="source_to_target"``) is a message from u to v, so node v attends to u: row v of the CSR
  lists u. Direction is kept as it is; nothing is symmetrized or deduplicated.
- Node data: DGL ``ndata["feat"|"label"|"train_mask"|"val_mask"|"test_mask"]`` (the names of DGL's
  built-in datasets), PyG ``x``, ``y``, ``train_mask``, ``val_mask``, ``test_mask``. Missing
  features become ones [N, 1], missing labels -1 (unlabelled), missing masks all False.
- Edge features: DGL ``edata["feat"]``, PyG ``edge_attr`` [E, F_e] (a 1-D array is one feature),
  row e for edge e; they move with their edges into CSR order and back.
- ``to_*`` lists edges in CSR order (by destination, then as stored), so Graph -> DGL/PyG -> Graph
  reproduces every array exactly. The other way round keeps the edge set, node data and each
  destination's in-edge order, but edges come back sorted by destination.
"""

from __future__ import annotations

import importlib

import numpy as np
import torch

from dsgraph.graph.graph import Graph

DGL_KEYS = {"x": "feat", "y": "label", "train_mask": "train_mask", "val_mask": "val_mask", "test_mask": "test_mask"}
MASKS = ("train_mask", "val_mask", "test_mask")
DGL_EDGE_KEY = "feat"  # edata field of the edge features (DGL's datasets' name)


def _require(module: str, extra: str):
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"this needs {module}: pip install 'dsgraph[{extra}]' ({err})") from None


def edge_arrays(graph: Graph) -> tuple[torch.Tensor, torch.Tensor]:
    """(src, dst) int64 [E] of every edge, in CSR order (sorted by destination)."""
    dst = torch.repeat_interleave(torch.arange(graph.num_nodes, dtype=torch.int64), graph.in_degrees())
    return graph.col.to(torch.int64), dst


def to_dgl(graph: Graph):
    """A ``dgl.DGLGraph`` with the same directed edges and ndata feat, label and the three masks."""
    dgl = _require("dgl", "dgl")
    src, dst = edge_arrays(graph)
    g = dgl.graph((src, dst), num_nodes=graph.num_nodes)
    for ours, theirs in DGL_KEYS.items():
        g.ndata[theirs] = getattr(graph, ours)
    if graph.edge_attr is not None:
        g.edata[DGL_EDGE_KEY] = graph.edge_attr
    return g


def from_dgl(g, *, name: str = "dgl", keys: dict[str, str] | None = None, edge_key: str = DGL_EDGE_KEY) -> Graph:
    """A validated Graph from a homogeneous ``DGLGraph``; ``keys`` renames the ndata fields read
    (defaults: x="feat", y="label", masks by their own names), ``edge_key`` the edata field of the
    edge features (read when present)."""
    if len(g.ntypes) != 1 or len(g.etypes) != 1:
        raise ValueError(f"DGLGraph: only homogeneous graphs convert (node types {g.ntypes}, edge types {g.etypes})")
    keys = {**DGL_KEYS, **(keys or {})}
    src, dst = g.edges(order="eid")
    n = int(g.num_nodes())
    data = {ours: g.ndata[theirs] for ours, theirs in keys.items() if theirs in g.ndata}
    edge_attr = g.edata[edge_key] if edge_key in g.edata else None
    return _build(src, dst, n, data, name, "DGLGraph", keys, edge_attr)


def to_pyg(graph: Graph):
    """A ``torch_geometric.data.Data`` with edge_index [2, E] (row 0 = sources), x, y and masks."""
    pyg_data = _require("torch_geometric.data", "pyg")
    src, dst = edge_arrays(graph)
    edge_attr = {} if graph.edge_attr is None else {"edge_attr": graph.edge_attr}
    return pyg_data.Data(
        x=graph.x,
        edge_index=torch.stack([src, dst]),
        y=graph.y,
        train_mask=graph.train_mask,
        val_mask=graph.val_mask,
        test_mask=graph.test_mask,
        num_nodes=graph.num_nodes,
        **edge_attr,
    )


def from_pyg(data, *, name: str = "pyg") -> Graph:
    """A validated Graph from a PyG ``Data`` (edge_index [2, E] of sources and destinations, and
    ``edge_attr`` when it has one)."""
    edge_index = data.edge_index
    if edge_index is None:
        edge_index = torch.zeros((2, 0), dtype=torch.int64)
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"PyG Data: array 'edge_index' must have shape [2, E], got {tuple(edge_index.shape)}")
    n = int(data.num_nodes) if data.num_nodes is not None else 0
    fields = {name_: getattr(data, name_, None) for name_ in ("x", "y", *MASKS)}
    present = {key: value for key, value in fields.items() if value is not None}
    edge_attr = getattr(data, "edge_attr", None)
    return _build(edge_index[0], edge_index[1], n, present, name, "PyG Data", {k: k for k in fields}, edge_attr)


def _build(src, dst, n: int, data: dict, name: str, source: str, keys: dict[str, str], edge_attr=None) -> Graph:
    x = _numpy(data["x"]) if "x" in data else np.ones((n, 1), dtype=np.float32)
    if x.ndim == 1:
        x = x.reshape(-1, 1)
    y = _labels(data["y"], source, keys["y"]) if "y" in data else np.full(n, -1, dtype=np.int64)
    masks = {m: _mask(data[m], source, keys[m]) if m in data else np.zeros(n, dtype=bool) for m in MASKS}
    edge_attr = None if edge_attr is None else _numpy(edge_attr)
    return Graph.from_edges(
        _numpy(src), _numpy(dst), x=x, y=y, num_nodes=n, name=name, source=source, edge_attr=edge_attr, **masks
    )


def _numpy(tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy() if isinstance(tensor, torch.Tensor) else np.asarray(tensor)


def _labels(tensor, source: str, key: str) -> np.ndarray:
    y = _numpy(tensor)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(
            f"{source}: array '{key}' must hold one class id per node, got shape {y.shape} (multi-label is not "
            "supported)"
        )
    if not np.issubdtype(y.dtype, np.integer):
        if not np.array_equal(y, np.round(y)):
            raise ValueError(f"{source}: array '{key}' must hold integer class ids, got {y.dtype} with fractions")
    return y.astype(np.int64)


def _mask(tensor, source: str, key: str) -> np.ndarray:
    mask = _numpy(tensor)
    if mask.ndim != 1:
        raise ValueError(
            f"{source}: array '{key}' must be a 1-D node mask, got shape {mask.shape} (pick one split column)"
        )
    if mask.dtype != np.bool_ and not np.isin(mask, (0, 1)).all():
        raise ValueError(f"{source}: array '{key}' must be boolean (or 0/1), got values outside {{0, 1}}")
    return mask.astype(bool)
