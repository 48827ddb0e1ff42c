"""Reading plain edge lists: one edge ``SOURCE DESTINATION`` per line.

Format: values separated by whitespace or by commas (detected from the first data line), ``#`` or
``%`` comments, blank lines, an optional header line (a first data line whose first two fields are
not integers, such as ``src,dst``), extra columns (weights, timestamps) ignored unless they are read
as edge features (``edge_features``: every line then has the same number of numeric columns, those
after the two ids being the edge's features), optionally gzip compressed. Node ids are non-negative
integers; each line is a directed edge SOURCE -> DESTINATION (symmetrize to read an undirected list).

The file is streamed: one pass counts lines to preallocate the id arrays, a second parses blocks of
lines straight into them (int32 ids, or int64 while relabelling), so memory is about 8 bytes per
edge plus one block of text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from dsgraph.graph.graph import MAX_NODES
from dsgraph.graph.readers import Block, count_lines, detect_delimiter, iter_blocks, parse_block, require_file

RELABEL_CHUNK = 1 << 22


@dataclass(kw_only=True, slots=True)
class EdgeList:
    """Edges ``src[e] -> dst[e]`` over nodes 0..num_nodes-1."""

    src: np.ndarray  # int32 [E]
    dst: np.ndarray  # int32 [E]
    num_nodes: int
    node_ids: np.ndarray | None = None  # int64 [N]: the file's id of each node, when relabelled
    header: str | None = None  # the header line that was skipped, if any
    edge_attr: np.ndarray | None = None  # float32 [E, F_e]: the columns after the ids, with edge_features


def read_edge_list(
    path: str | os.PathLike, *, relabel: bool = False, block_bytes: int | None = None, edge_features: bool = False
) -> EdgeList:
    """Reads an edge list file (see the module docstring for the format).

    Without ``relabel`` node ids are used as they are, N is the largest id + 1 and ids that no line
    mentions become isolated nodes. With ``relabel`` the distinct ids, in ascending order, become
    0..N-1 and ``node_ids`` keeps the original id of every node. ``edge_features``: the columns
    after the ids are the edges' features (``edge_attr``).
    """
    path = require_file(path, "edge list")
    capacity = count_lines(path)
    id_dtype = np.int64 if relabel else np.int32
    src = np.empty(capacity, dtype=id_dtype)
    dst = np.empty(capacity, dtype=id_dtype)
    attr = None
    filled = 0
    delimiter: str | None = None
    header: str | None = None
    blocks = iter_blocks(path) if block_bytes is None else iter_blocks(path, block_bytes)
    for index, block in enumerate(blocks):
        if index == 0:
            delimiter = detect_delimiter(block)
            block, header = drop_header(block, delimiter)
        if edge_features and attr is None:
            attr = _feature_table(block, delimiter, capacity)
        rows = _parse_rows(block, delimiter, attr)
        _check_ids(block, rows[:, :2], relabel)
        src[filled : filled + len(rows)] = rows[:, 0]
        dst[filled : filled + len(rows)] = rows[:, 1]
        if attr is not None:
            attr[filled : filled + len(rows)] = rows[:, 2:]
        filled += len(rows)
    src, dst = src[:filled], dst[:filled]
    attr = attr[:filled] if attr is not None else (np.zeros((0, 1), np.float32) if edge_features else None)
    if not relabel:
        num_nodes = int(max(src.max(), dst.max())) + 1 if filled else 0
        return EdgeList(src=src, dst=dst, num_nodes=num_nodes, header=header, edge_attr=attr)
    node_ids = unique_ids(src, dst)
    if len(node_ids) > MAX_NODES:
        raise ValueError(f"{path}: {len(node_ids)} distinct node ids exceed the int32 limit {MAX_NODES}")
    return EdgeList(
        src=_relabel(src, node_ids),
        dst=_relabel(dst, node_ids),
        num_nodes=len(node_ids),
        node_ids=node_ids,
        header=header,
        edge_attr=attr,
    )


def _feature_table(block: Block, delimiter: str | None, capacity: int) -> np.ndarray | None:
    """The float32 [capacity, F_e] table for the columns after the ids, F_e from the first data line."""
    for lineno, data in block.data_lines():
        columns = len(data.split(delimiter))
        if columns < 3:
            raise ValueError(
                f"{block.path}, line {lineno}: edge features need columns after SOURCE DESTINATION, found {columns} "
                "values"
            )
        return np.empty((capacity, columns - 2), dtype=np.float32)
    return None


def _parse_rows(block: Block, delimiter: str | None, attr: np.ndarray | None) -> np.ndarray:
    """[rows, 2] int64 ids, or with an edge feature table [rows, 2 + F_e] float64 with integral ids."""
    if attr is None:
        return parse_block(block, columns=2, dtype=np.int64, delimiter=delimiter)
    rows = parse_block(block, columns=2 + attr.shape[1], dtype=np.float64, delimiter=delimiter, exact=True)
    ids = rows[:, :2]
    bad = ~np.isfinite(ids) | (ids != np.round(ids)) | (np.abs(ids) >= 2**62)
    if bad.any():
        row, col = (int(i[0]) for i in np.nonzero(bad))
        raise ValueError(f"{block.path}, line {block.line_of_row(row)}: node id {rows[row, col]!r} is not an integer")
    bad = ~np.isfinite(rows[:, 2:]).all(axis=1)
    if bad.any():
        raise ValueError(
            f"{block.path}, line {block.line_of_row(int(np.flatnonzero(bad)[0]))}: an edge feature is NaN or Inf"
        )
    return rows


def drop_header(block: Block, delimiter: str | None) -> tuple[Block, str | None]:
    """Blanks the first data line of the file if it is a header (line numbers stay right)."""
    for lineno, data in block.data_lines():
        fields = [t.strip() for t in data.split(delimiter)][:2]
        if len(fields) == 2 and all(_is_int(f) for f in fields):
            return block, None
        lines = block.text.split("\n")
        original = lines[lineno - block.first_line]
        lines[lineno - block.first_line] = ""
        return Block(block.path, block.first_line, "\n".join(lines)), original.strip()
    return block, None


def _is_int(token: str) -> bool:
    try:
        int(token)
    except ValueError:
        return False
    return True


def _check_ids(block: Block, rows: np.ndarray, relabel: bool) -> None:
    if not rows.size:
        return
    negative = rows < 0
    too_big = np.zeros_like(negative) if relabel else rows >= MAX_NODES
    if not (negative.any() or too_big.any()):
        return
    row, col = (int(i[0]) for i in np.nonzero(negative | too_big))
    value = int(rows[row, col])
    which = "source" if col == 0 else "destination"
    where = f"{block.path}, line {block.line_of_row(row)}"
    if value < 0:
        raise ValueError(f"{where}: negative {which} node id {value}; node ids must be >= 0")
    raise ValueError(
        f"{where}: {which} node id {value} exceeds the int32 limit {MAX_NODES - 1}; "
        "use --relabel (relabel=True) to number the distinct ids 0..N-1"
    )


def unique_ids(src: np.ndarray, dst: np.ndarray, chunk: int = RELABEL_CHUNK) -> np.ndarray:
    """Sorted distinct values of ``src`` and ``dst``, computed slice by slice so that no full-size
    temporary is made (memory: the distinct ids plus a few slices)."""
    known = np.zeros(0, dtype=np.int64)
    pending: list[np.ndarray] = []
    pending_size = 0
    for array in (src, dst):
        for start in range(0, len(array), chunk):
            part = np.unique(array[start : start + chunk])
            pending.append(part)
            pending_size += len(part)
            if pending_size > len(known) + chunk:
                known = np.unique(np.concatenate([known, *pending]))
                pending, pending_size = [], 0
    return np.unique(np.concatenate([known, *pending]))


def _relabel(ids: np.ndarray, node_ids: np.ndarray, chunk: int = RELABEL_CHUNK) -> np.ndarray:
    """Maps every id to its position in the sorted ``node_ids`` (in place, then narrowed to int32)."""
    for start in range(0, len(ids), chunk):
        ids[start : start + chunk] = np.searchsorted(node_ids, ids[start : start + chunk])
    return ids.astype(np.int32)
