"""Reading OGB node-property-prediction datasets from their raw folders (no ``ogb`` package needed).

Layout (as unpacked from OGB's zip, e.g. ``ogbn_arxiv/``)::

    raw/num-node-list.csv.gz     one line: N
    raw/edge.csv.gz              one edge per line: SOURCE,DESTINATION (E lines)
    raw/node-feat.csv.gz         N lines of F comma-separated numbers (optional: else ones [N, 1])
    raw/node-label.csv.gz        N lines of one class id (optional: else -1; NaN or -1 = unlabelled)
    raw/edge-feat.csv.gz         E lines of F_e comma-separated numbers, line e for edge line e (optional)
    split/<scheme>/train.csv.gz  node ids, one per line; also valid.csv.gz and test.csv.gz

Files may also be plain ``.csv``. Edges are read as given (OGB stores arxiv's citations one way;
symmetrize for an undirected graph). Every array is streamed into a preallocated result.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from dsgraph.graph.graph import MAX_NODES
from dsgraph.graph.readers import check_range, count_lines, iter_blocks, parse_block

SPLIT_FILES = {"train_mask": "train", "val_mask": "valid", "test_mask": "test"}


@dataclass(kw_only=True, slots=True)
class OgbArrays:
    """The arrays of one OGB node-property dataset (edges src -> dst)."""

    src: np.ndarray  # int32 [E]
    dst: np.ndarray  # int32 [E]
    num_nodes: int
    x: np.ndarray  # float32 [N, F]
    y: np.ndarray  # int64 [N], -1 = unlabelled
    masks: dict[str, np.ndarray]  # train_mask, val_mask, test_mask: bool [N]
    split: str | None  # the split scheme used
    edge_attr: np.ndarray | None = None  # float32 [E, F_e] (raw/edge-feat), row e for edge e


def is_ogb_folder(path: str | os.PathLike) -> bool:
    return os.path.isdir(path) and _find(os.fspath(path), "raw/edge.csv") is not None


def read_ogb(folder: str | os.PathLike, *, split: str | None = None) -> OgbArrays:
    """Reads an OGB node-property folder; ``split`` names the scheme under split/ (needed only when
    there are several)."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{folder}: no such OGB dataset folder")
    num_nodes = _read_num_nodes(_require(folder, "raw/num-node-list.csv"))
    src, dst = _read_edges(_require(folder, "raw/edge.csv"), num_nodes)
    feat = _find(folder, "raw/node-feat.csv")
    x = _read_features(feat, num_nodes) if feat else np.ones((num_nodes, 1), dtype=np.float32)
    edge_feat = _find(folder, "raw/edge-feat.csv")
    edge_attr = _read_features(edge_feat, src.size, "edge feature", "edges of edge.csv") if edge_feat else None
    label = _find(folder, "raw/node-label.csv")
    y = _read_labels(label, num_nodes) if label else np.full(num_nodes, -1, dtype=np.int64)
    scheme = _split_scheme(folder, split)
    masks = {name: np.zeros(num_nodes, dtype=bool) for name in SPLIT_FILES}
    if scheme is not None:
        for name, stem in SPLIT_FILES.items():
            path = _find(folder, f"split/{scheme}/{stem}.csv")
            if path is not None:
                masks[name] = _read_split(path, num_nodes)
    return OgbArrays(src=src, dst=dst, num_nodes=num_nodes, x=x, y=y, masks=masks, split=scheme, edge_attr=edge_attr)


def _find(folder: str, relative: str) -> str | None:
    for candidate in (relative + ".gz", relative):
        path = os.path.join(folder, candidate)
        if os.path.isfile(path):
            return path
    return None


def _require(folder: str, relative: str) -> str:
    path = _find(folder, relative)
    if path is None:
        raise FileNotFoundError(f"{folder}: missing {relative}.gz (an OGB node-property folder needs it)")
    return path


def _read_num_nodes(path: str) -> int:
    counts = [parse_block(b, columns=1, dtype=np.int64, exact=True) for b in iter_blocks(path)]
    values = np.concatenate(counts).ravel() if counts else np.zeros(0, dtype=np.int64)
    if len(values) != 1:
        raise ValueError(f"{path}: expected one node count (one graph), found {len(values)} lines")
    num_nodes = int(values[0])
    if not 0 <= num_nodes <= MAX_NODES:
        raise ValueError(f"{path}: node count {num_nodes} is not in [0, {MAX_NODES}]")
    return num_nodes


def _read_edges(path: str, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    capacity = count_lines(path)
    src = np.empty(capacity, dtype=np.int32)
    dst = np.empty(capacity, dtype=np.int32)
    filled = 0
    for block in iter_blocks(path):
        rows = parse_block(block, columns=2, dtype=np.int64, delimiter=",")
        check_range(block, rows, 0, num_nodes, "node id")
        src[filled : filled + len(rows)] = rows[:, 0]
        dst[filled : filled + len(rows)] = rows[:, 1]
        filled += len(rows)
    return src[:filled], dst[:filled]


def _read_features(
    path: str, num_rows: int, what: str = "feature", counted: str = "nodes of num-node-list"
) -> np.ndarray:
    """float32 [num_rows, F] from a table of F comma-separated numbers per line (node or edge features)."""
    x = None
    filled = 0
    for block in iter_blocks(path):
        if x is None:
            first = next(block.data_lines(), None)
            if first is None:
                continue
            x = np.empty((num_rows, len(first[1].split(","))), dtype=np.float32)
        rows = parse_block(block, columns=x.shape[1], dtype=np.float64, delimiter=",", exact=True)
        if filled + len(rows) > num_rows:
            line = block.line_of_row(num_rows - filled)
            raise ValueError(f"{path}, line {line}: more {what} rows than the {num_rows} {counted}")
        x[filled : filled + len(rows)] = rows
        filled += len(rows)
    if filled != num_rows:
        says = f"num-node-list says {num_rows} nodes" if what == "feature" else f"there are {num_rows} {counted}"
        raise ValueError(f"{path}: {filled} {what} rows but {says}")
    return x if x is not None else np.zeros((0, 1), dtype=np.float32)


def _read_labels(path: str, num_nodes: int) -> np.ndarray:
    y = np.empty(num_nodes, dtype=np.int64)
    filled = 0
    for block in iter_blocks(path):
        rows = parse_block(block, columns=1, dtype=np.float64, delimiter=",", exact=True)
        if filled + len(rows) > num_nodes:
            line = block.line_of_row(num_nodes - filled)
            raise ValueError(f"{path}, line {line}: more label rows than the {num_nodes} nodes of num-node-list")
        labels = rows[:, 0]
        unlabelled = np.isnan(labels)
        bad = ~unlabelled & ((labels != np.round(labels)) | (labels < -1))
        if bad.any():
            row = int(np.nonzero(bad)[0][0])
            raise ValueError(
                f"{path}, line {block.line_of_row(row)}: label {labels[row]:g} is not a class id >= 0 "
                "(or -1/NaN for unlabelled)"
            )
        y[filled : filled + len(rows)] = np.where(unlabelled, -1, labels).astype(np.int64)
        filled += len(rows)
    if filled != num_nodes:
        raise ValueError(f"{path}: {filled} label rows but num-node-list says {num_nodes} nodes")
    return y


def _split_scheme(folder: str, split: str | None) -> str | None:
    root = os.path.join(folder, "split")
    schemes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))) if os.path.isdir(root) else []
    if split is not None:
        if split not in schemes:
            raise FileNotFoundError(f"{root}: no split scheme '{split}'; found {', '.join(schemes) or 'none'}")
        return split
    if len(schemes) > 1:
        raise ValueError(f"{root}: several split schemes ({', '.join(schemes)}); choose one with --split NAME")
    return schemes[0] if schemes else None


def _read_split(path: str, num_nodes: int) -> np.ndarray:
    mask = np.zeros(num_nodes, dtype=bool)
    for block in iter_blocks(path):
        rows = parse_block(block, columns=1, dtype=np.int64, delimiter=",")
        check_range(block, rows, 0, num_nodes, "node index")
        mask[rows[:, 0]] = True
    return mask
