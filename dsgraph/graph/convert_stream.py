"""``dsgraph convert`` of an edge list or an OGB folder larger than memory: the edges go through
sorted runs on disk into a dataset ``.npz`` in CSR order, and from there (``store_stream.py``) into a
partition store.

One pass over the edge text parses a block of lines at a time into keys ``dst << 31 | src`` (ids are
below 2^31, the int32 limit, so the keys sort by destination, then source), drops self loops, adds
the reverse of every edge (``symmetrize``) and writes each batch as a sorted run
(``external_sort.py``); the k-way merge removes repeated edges (``dedup``) and its chunks are written
as the ``src``/``dst`` members, then the node arrays one chunk at a time: for an edge list, features
``[N, 1]`` of ones or the given ``.npy`` (memory-mapped), labels -1 or the given ones, empty split
masks; for an OGB folder, ``raw/node-feat`` parsed block by block into a memory map in the scratch
folder, its labels and its split. Memory: one block of text and one batch of keys while reading, the
merge's window while writing, and N-sized node arrays; never E-sized, and never the features (the
memory-mapped runs, features and outputs are page cache the kernel takes back). Relabelling and edge
features need the whole edge list (edge features follow their edges through the sort): refused here
with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dsgraph.graph.edgelist import drop_header
from dsgraph.graph.external_sort import SortedRuns
from dsgraph.graph.graph import MAX_NODES
from dsgraph.graph.npz_map import release_pages
from dsgraph.graph.npz_stream import NpzWriter
from dsgraph.graph.readers import BLOCK_BYTES, detect_delimiter, iter_blocks, parse_block, require_file

ID_BITS = 31  # node ids are int32
BATCH_KEYS = 1 << 23  # keys sorted into one run (64 MB)
CHUNK = 1 << 22  # values written per piece
MASKS = ("train_mask", "val_mask", "test_mask")


@dataclass
class StreamedEdges:
    """What the streamed conversion read and wrote."""

    num_nodes: int
    num_edges: int  # written
    lines: int  # edges read from the file
    self_loops_dropped: int = 0
    reverse_added: int = 0
    duplicates_removed: int = 0
    header: str | None = None

    def lines_summary(self, path: str) -> list[str]:
        out = [
            f"converted out of core: {path}",
            f"  read {self.lines:,} edges; wrote {self.num_nodes:,} nodes and {self.num_edges:,} edges (CSR order)",
        ]
        if self.self_loops_dropped or self.reverse_added or self.duplicates_removed:
            out.append(
                f"  cleanup: {self.self_loops_dropped:,} self loops dropped, {self.reverse_added:,} reverse edges "
                f"added, {self.duplicates_removed:,} repeated edges removed"
            )
        if self.header:
            out.append(f"  header skipped: {self.header}")
        return out


@dataclass(kw_only=True)
class EdgeText:
    """Where the edges come from: a text file of SOURCE DESTINATION lines, and how to read it."""

    path: str
    num_nodes: int | None = None  # ids must be below it; None: N is the largest id + 1
    delimiter: str | None = None  # None: detected from the first block
    header: bool = True  # a first line that is not two integers is skipped (and reported)


NodeArrays = Callable[[int, str], dict[str, np.ndarray]]  # (N, scratch folder) -> x, y and the masks


@dataclass(kw_only=True)
class Bounds:
    """What bounds the memory: text per block, keys per sorted run, keys read per run per merge step,
    values written per piece (defaults: the readers' block, ``BATCH_KEYS``, the merge's, ``CHUNK``)."""

    block_bytes: int = BLOCK_BYTES
    batch_keys: int = BATCH_KEYS
    merge_window: int | None = None
    chunk: int = CHUNK


def convert_edge_list_streamed(
    path: str,
    out_npz: str,
    *,
    symmetrize: bool = False,
    drop_self_loops: bool = False,
    dedup: bool = False,
    features: str | None = None,
    labels: str | None = None,
    scratch: str | None = None,
    bounds: Bounds | None = None,
    progress: bool = False,
) -> StreamedEdges:
    """Writes the dataset ``.npz`` ``out_npz`` of the edge list ``path`` without holding its edges in
    memory (module docstring); ``scratch``: the folder for the sorted runs (default: beside ``out_npz``).
    ``bounds`` bound the memory."""
    edges = EdgeText(path=require_file(path, "edge list"))
    return stream_to_npz(
        edges,
        out_npz,
        lambda n, _: _given_node_arrays(n, features, labels),
        cleanup=dict(symmetrize=symmetrize, drop_self_loops=drop_self_loops, dedup=dedup),
        scratch=scratch,
        bounds=bounds,
        progress=progress,
    )


def convert_ogb_streamed(
    folder: str,
    out_npz: str,
    *,
    split: str | None = None,
    symmetrize: bool = False,
    drop_self_loops: bool = False,
    dedup: bool = False,
    scratch: str | None = None,
    bounds: Bounds | None = None,
    progress: bool = False,
) -> tuple[StreamedEdges, str | None]:
    """Writes the dataset ``.npz`` ``out_npz`` of the OGB node-property folder ``folder`` without its
    edges or features in memory; returns what was read and the split scheme used. ValueError for a
    folder with edge features (raw/edge-feat), which follow their edges through the sort."""
    from dsgraph.graph.ogb import ogb_files, read_node_arrays

    files = ogb_files(folder, split=split)
    if files.edge_features:
        raise ValueError(
            f"{files.edge_features}: edge features are not carried out of core (each would have to follow its "
            "edge through the sort); convert this folder in memory (a larger --memory-gb)"
        )

    bounds = bounds or Bounds()

    def node_arrays(n: int, scratch_dir: str) -> dict[str, np.ndarray]:
        arrays = read_node_arrays(files, out_dir=scratch_dir, block_bytes=bounds.block_bytes)
        for name, mask in arrays["masks"].items():  # as Graph.validate checks a graph read in memory
            if bool((mask & (arrays["y"] < 0)).any()):
                raise ValueError(f"{folder}: '{name}' selects a node whose label is -1 (unlabelled)")
        return {"x": arrays["x"], "y": arrays["y"], **arrays["masks"]}

    edges = EdgeText(path=files.edges, num_nodes=files.num_nodes, delimiter=",", header=False)
    cleanup = dict(symmetrize=symmetrize, drop_self_loops=drop_self_loops, dedup=dedup)
    stats = stream_to_npz(
        edges, out_npz, node_arrays, cleanup=cleanup, scratch=scratch, bounds=bounds, progress=progress
    )
    return stats, files.split


def stream_to_npz(
    edges: EdgeText,
    out_npz: str,
    node_arrays: NodeArrays,
    *,
    cleanup: dict,
    scratch: str | None = None,
    bounds: Bounds | None = None,
    progress: bool = False,
) -> StreamedEdges:
    """The conversion both inputs share: ``edges`` through sorted runs into ``out_npz``'s src/dst, then
    ``node_arrays(N, folder)`` (x, y and the three masks; ``folder`` is scratch space removed at the
    end) written chunk by chunk. ``cleanup``: symmetrize, drop_self_loops, dedup (booleans)."""
    bounds = bounds or Bounds()
    scratch = scratch or os.path.dirname(os.path.abspath(out_npz))
    dedup = cleanup["dedup"]
    with SortedRuns(scratch) as runs:
        stats = _read_into_runs(edges, runs, cleanup, bounds, progress)
        nodes = node_arrays(stats.num_nodes, runs.folder)
        merged = _merged_edges(runs, dedup, bounds.merge_window, progress)
        stats.num_edges = int(merged["src"].size)
        read = stats.lines - stats.self_loops_dropped + stats.reverse_added
        stats.duplicates_removed = read - stats.num_edges
        with NpzWriter(out_npz) as npz:
            for name in ("src", "dst"):
                _write_chunked(npz, name, merged[name], np.int32, bounds.chunk)
            _write_chunked(npz, "x", nodes["x"], np.float32, bounds.chunk)
            npz.array("y", nodes["y"])
            for mask in MASKS:
                npz.array(mask, nodes[mask])
        del merged, nodes
    return stats


def _read_into_runs(edges: EdgeText, runs: SortedRuns, cleanup: dict, bounds: Bounds, progress) -> StreamedEdges:
    """One pass over the text: keys of every edge into sorted runs; the node count and what was cleaned."""
    stats = StreamedEdges(num_nodes=edges.num_nodes or 0, num_edges=0, lines=0)
    delimiter, pending, held = edges.delimiter, [], 0
    blocks = iter_blocks(edges.path, bounds.block_bytes)
    for index, block in enumerate(_bar(blocks, progress, f"{os.path.basename(edges.path)}: reading")):
        if index == 0:
            delimiter = delimiter or detect_delimiter(block)
            if edges.header:
                block, stats.header = drop_header(block, delimiter)
        rows = parse_block(block, columns=2, dtype=np.int64, delimiter=delimiter)
        if not rows.size:
            continue
        _check_ids(edges, block, rows)
        stats.lines += len(rows)
        if edges.num_nodes is None:
            stats.num_nodes = max(stats.num_nodes, int(rows.max()) + 1)
        src, dst = rows[:, 0], rows[:, 1]
        if cleanup["drop_self_loops"]:
            keep = src != dst
            stats.self_loops_dropped += int((~keep).sum())
            src, dst = src[keep], dst[keep]
        keys = [(dst << ID_BITS) | src]
        if cleanup["symmetrize"]:
            keys.append((src << ID_BITS) | dst)
            stats.reverse_added += int(src.size)
        pending += keys
        held += sum(k.size for k in keys)
        if held >= bounds.batch_keys:
            runs.add(np.concatenate(pending), dedup=cleanup["dedup"])
            pending, held = [], 0
    if pending:
        runs.add(np.concatenate(pending), dedup=cleanup["dedup"])
    return stats


def _check_ids(edges: EdgeText, block, rows: np.ndarray) -> None:
    """ValueError naming the line of the first id outside [0, N) (N: the given node count, else the
    int32 limit)."""
    limit = MAX_NODES if edges.num_nodes is None else edges.num_nodes
    bad = (rows < 0) | (rows >= limit)
    if not bad.any():
        return
    row, col = (int(i[0]) for i in np.nonzero(bad))
    why = (
        "out of core, ids are used as they are: --relabel needs the edge list in memory"
        if edges.num_nodes is None
        else "the node count of the dataset"
    )
    raise ValueError(
        f"{edges.path}, line {block.line_of_row(row)}: node id {int(rows[row, col])} is outside [0, {limit}) ({why})"
    )


def _merged_edges(runs: SortedRuns, dedup: bool, window: int | None, progress: bool) -> dict[str, np.ndarray]:
    """The merged keys as int32 src and dst memory maps in the runs' folder (CSR order)."""
    files = {name: os.path.join(runs.folder, f"{name}.npy") for name in ("src", "dst")}
    out = {name: np.lib.format.open_memmap(f, "w+", np.int32, (runs.num_keys,)) for name, f in files.items()}
    pos = 0
    for keys in _bar(runs.merge(dedup=dedup, window=window), progress, "merging runs"):
        out["dst"][pos : pos + keys.size] = keys >> ID_BITS
        out["src"][pos : pos + keys.size] = keys & ((1 << ID_BITS) - 1)
        pos += keys.size
        release_pages(out["dst"]), release_pages(out["src"])
    for array in out.values():
        array.flush()
    return {name: np.load(f, mmap_mode="r")[:pos] for name, f in files.items()}


def _given_node_arrays(n: int, features: str | None, labels: str | None) -> dict[str, np.ndarray]:
    """An edge list's node arrays: x [N, F] (ones [N, 1] without ``features``; a given .npy is
    memory-mapped), y [N] int64 and empty masks."""
    if features:
        x = np.load(features, mmap_mode="r")
        if x.ndim != 2 or x.shape[0] != n:
            raise ValueError(f"{features}: features must be [N, F], N = {n} (the largest node id + 1); got {x.shape}")
    else:
        x = np.lib.stride_tricks.as_strided(np.ones(1, np.float32), shape=(n, 1), strides=(0, 0))  # no N-sized copy
    if labels:
        y = np.load(labels)
        if y.shape != (n,) or not np.issubdtype(y.dtype, np.integer):
            raise ValueError(f"{labels}: labels must be integers [N] with N = {n}, got {y.dtype} {y.shape}")
        y = y.astype(np.int64)
    else:
        y = np.full(n, -1, dtype=np.int64)
    return {"x": x, "y": y, **{mask: np.zeros(n, dtype=bool) for mask in MASKS}}


def _write_chunked(npz: NpzWriter, name: str, array: np.ndarray, dtype, chunk: int) -> None:
    rows = max(1, chunk // max(1, int(np.prod(array.shape[1:]))))
    with npz.member(name, dtype, array.shape) as stream:
        for lo in range(0, array.shape[0], rows):
            stream.write(np.asarray(array[lo : lo + rows]))
            release_pages(array)


def _bar(items, enabled: bool, desc: str):
    if not enabled:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="block")
