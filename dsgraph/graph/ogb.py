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
from dsgraph.graph.npz_map import release_pages
from dsgraph.graph.readers import BLOCK_BYTES, check_range, count_lines, iter_blocks, parse_block

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


@dataclass(kw_only=True, frozen=True)
class OgbFiles:
    """Where an OGB folder's arrays are (None: the file is absent) and its node count."""

    num_nodes: int
    edges: str
    node_features: str | None
    labels: str | None
    edge_features: str | None
    split: str | None  # the split scheme used
    split_files: dict[str, str]  # mask name -> its file under split/<scheme>/


def is_ogb_folder(path: str | os.PathLike) -> bool:
    return os.path.isdir(path) and _find(os.fspath(path), "raw/edge.csv") is not None


def ogb_files(folder: str | os.PathLike, *, split: str | None = None) -> OgbFiles:
    """Finds an OGB node-property folder's files and reads its node count; ``split`` names the scheme
    under split/ (needed only when there are several)."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{folder}: no such OGB dataset folder")
    scheme = _split_scheme(folder, split)
    split_files = {}
    if scheme is not None:
        for name, stem in SPLIT_FILES.items():
            path = _find(folder, f"split/{scheme}/{stem}.csv")
            if path is not None:
                split_files[name] = path
    return OgbFiles(
        num_nodes=_read_num_nodes(_require(folder, "raw/num-node-list.csv")),
        edges=_require(folder, "raw/edge.csv"),
        node_features=_find(folder, "raw/node-feat.csv"),
        labels=_find(folder, "raw/node-label.csv"),
        edge_features=_find(folder, "raw/edge-feat.csv"),
        split=scheme,
        split_files=split_files,
    )


def read_ogb(folder: str | os.PathLike, *, split: str | None = None) -> OgbArrays:
    """Reads an OGB node-property folder into memory (``ogb_files`` finds its files)."""
    files = ogb_files(folder, split=split)
    n = files.num_nodes
    src, dst = _read_edges(files.edges, n)
    edge_attr = None
    if files.edge_features:
        edge_attr = _read_features(files.edge_features, src.size, "edge feature", "edges of edge.csv")
    return OgbArrays(src=src, dst=dst, num_nodes=n, **read_node_arrays(files), split=files.split, edge_attr=edge_attr)


def read_node_arrays(files: OgbFiles, out_dir: str | None = None, block_bytes: int = BLOCK_BYTES) -> dict:
    """x (float32 [N, F]; ones [N, 1] without raw/node-feat), y (int64 [N], -1 = unlabelled) and the
    split masks (``masks``: bool [N] each). With ``out_dir`` the features are parsed into a memory map
    there (``x.npy``) whose pages go back to the kernel block by block, so they never sit in memory.
    ``block_bytes``: the text parsed at a time."""
    n = files.num_nodes
    x = np.ones((n, 1), dtype=np.float32)
    if files.node_features:
        out = None if out_dir is None else os.path.join(out_dir, "x.npy")
        x = _read_features(files.node_features, n, out=out, block_bytes=block_bytes)
    y = _read_labels(files.labels, n, block_bytes) if files.labels else np.full(n, -1, dtype=np.int64)
    masks = {name: np.zeros(n, dtype=bool) for name in SPLIT_FILES}
    for name, path in files.split_files.items():
        masks[name] = _read_split(path, n, block_bytes)
    return {"x": x, "y": y, "masks": masks}


def feature_width(path: str | None) -> int:
    """F of a feature table (the numbers on its first data line; 1 without one: features of ones)."""
    for block in iter_blocks(path) if path else ():
        for _, line in block.data_lines():
            return len(line.split(","))
    return 1


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
    path: str,
    num_rows: int,
    what: str = "feature",
    counted: str = "nodes of num-node-list",
    out: str | None = None,
    block_bytes: int = BLOCK_BYTES,
) -> np.ndarray:
    """float32 [num_rows, F] from a table of F comma-separated numbers per line (node or edge features);
    with ``out`` (an .npy path) a memory map there, its pages released after every block."""
    x = None
    filled = 0
    for block in iter_blocks(path, block_bytes):
        if x is None:
            first = next(block.data_lines(), None)
            if first is None:
                continue
            shape = (num_rows, len(first[1].split(",")))
            x = np.empty(shape, np.float32) if out is None else np.lib.format.open_memmap(out, "w+", np.float32, shape)
        rows = parse_block(block, columns=x.shape[1], dtype=np.float64, delimiter=",", exact=True)
        if filled + len(rows) > num_rows:
            line = block.line_of_row(num_rows - filled)
            raise ValueError(f"{path}, line {line}: more {what} rows than the {num_rows} {counted}")
        x[filled : filled + len(rows)] = rows
        filled += len(rows)
        release_pages(x)
    if filled != num_rows:
        says = f"num-node-list says {num_rows} nodes" if what == "feature" else f"there are {num_rows} {counted}"
        raise ValueError(f"{path}: {filled} {what} rows but {says}")
    return x if x is not None else np.zeros((0, 1), dtype=np.float32)


def _read_labels(path: str, num_nodes: int, block_bytes: int = BLOCK_BYTES) -> np.ndarray:
    y = np.empty(num_nodes, dtype=np.int64)
    filled = 0
    for block in iter_blocks(path, block_bytes):
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


def _read_split(path: str, num_nodes: int, block_bytes: int = BLOCK_BYTES) -> np.ndarray:
    mask = np.zeros(num_nodes, dtype=bool)
    for block in iter_blocks(path, block_bytes):
        rows = parse_block(block, columns=1, dtype=np.int64, delimiter=",")
        check_range(block, rows, 0, num_nodes, "node index")
        mask[rows[:, 0]] = True
    return mask
