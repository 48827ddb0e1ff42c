"""A partition store written from a dataset file without the whole graph in memory.

For the contiguous methods ('balanced', 'contiguous') the parts are id ranges of the file's own
order, so nothing is relabelled: each part's in-edges are one slice of the edges once they are in
CSR order (by destination). A file already in that order (an R-MAT graph built out of core,
``rmat_stream.py``) is read as it is; any other is first sorted by (destination, source) on disk
(``external_sort.py``). Every part's arrays are then copied slice by slice into memory-mapped
``.npy`` files, its halo marked in an N-sized bitmap. Memory: a few N-sized arrays (degrees, row
pointers, the bitmap) and one chunk of edges; never E-sized.

On a file in CSR order the store equals the one ``store.write_store`` writes from the whole graph
(same files, same checksums; tested). Edge features and stored encodings are not carried out of
core (an error says so); the counted ``degree`` encoding is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from dsgraph.graph.encodings import degrees
from dsgraph.graph.external_sort import SortedRuns
from dsgraph.graph.npz_map import release_pages
from dsgraph.graph.partition import PartitionQuality
from dsgraph.graph.rank_reader import DatasetFile
from dsgraph.graph.split import balanced_bounds
from dsgraph.graph.store import PERM_FILE, StoreFiles, part_dir_name, prepare_out_dir, store_meta, write_meta

STREAM_METHODS = ("balanced", "contiguous")
CHUNK_EDGES = 1 << 23  # edges copied or sorted per step


@dataclass
class CsrEdges:
    """A file's edges in CSR order (arrays or memory maps) with each node's in- and out-degree."""

    src: np.ndarray
    dst: np.ndarray
    degree: np.ndarray  # int64 [N, 2]

    @property
    def rowptr(self) -> np.ndarray:
        rowptr = np.zeros(self.degree.shape[0] + 1, dtype=np.int64)
        np.cumsum(self.degree[:, 0], out=rowptr[1:])
        return rowptr


def write_store_streamed(
    path: str,
    num_parts: int,
    method: str,
    out_dir: str,
    *,
    scratch: str,
    dataset: str,
    extra: dict | None = None,
    overwrite: bool = False,
    progress: bool = False,
    chunk_edges: int = CHUNK_EDGES,
) -> tuple[dict, PartitionQuality]:
    """Writes the store of the dataset .npz ``path`` split into ``num_parts`` ranges by ``method``
    ('balanced' or 'contiguous'); ``scratch``: a folder for sorted runs when the file is not in CSR
    order. Returns (META, the partition's quality)."""
    if method not in STREAM_METHODS:
        raise ValueError(f"out-of-core partitioning supports {', '.join(STREAM_METHODS)}, not '{method}'")
    data = _checked_file(path)
    n = data.num_nodes
    if not 1 <= num_parts <= max(n, 1):
        raise ValueError(f"cannot split a graph of {n} nodes into {num_parts} parts; need 1 <= parts <= {n}")
    prepare_out_dir(out_dir, overwrite)
    with SortedRuns(scratch) as runs:
        edges = csr_edges(data, runs, chunk_edges, progress)
        degree = edges.degree[:, 0]
        bounds = balanced_bounds(degree, num_parts) if method == "balanced" else _even_bounds(n, num_parts)
        node_ranges = np.stack([bounds[:-1], bounds[1:]], axis=1).astype(np.int64)
        files = StoreFiles(out_dir)
        files.save(PERM_FILE, np.arange(n, dtype=np.int64))
        figures = _write_parts(files, data, edges, node_ranges, chunk_edges, progress)
    quality = PartitionQuality(num_parts=num_parts, num_edges=int(edges.src.size), **figures)
    meta = store_meta(
        files,
        dataset=dataset,
        method=method,
        seed=0,
        node_ranges=node_ranges,
        part_edges=quality.part_edges,
        part_halo=quality.halo_sizes,
        sizes={
            "num_nodes": n,
            "num_edges": int(edges.src.size),
            "num_features": data.num_features,
            "feature_dtype": "float32",
            "num_classes": data.num_classes(),
            "num_edge_features": 0,
        },
        encodings={"degree": 2},
        extra={**(extra or {}), "quality": quality.as_dict()},
    )
    write_meta(out_dir, meta)
    return meta, quality


def _checked_file(path: str) -> DatasetFile:
    data = DatasetFile(path)
    where = f"{path}: out-of-core partitioning"
    if "src" not in data.arrays:
        raise ValueError(f"{where} reads src/dst edge lists; convert the file with `dsgraph convert` first")
    if data.has_edge_features or data.stored:
        held = ", ".join(["edge features"] * data.has_edge_features + list(data.stored))
        raise ValueError(f"{where} does not carry {held}; use --method metis or random (in memory)")
    if data.multilabel or data.continuous or data.arrays["y"].ndim != 1:
        raise ValueError(f"{where} needs single-label int labels y [N]")
    return data


def _even_bounds(n: int, num_parts: int) -> np.ndarray:
    """The ranges of the 'contiguous' method (node i in part i * P // n)."""
    return -(-np.arange(num_parts + 1, dtype=np.int64) * n // num_parts)


def csr_edges(data: DatasetFile, runs: SortedRuns, chunk_edges: int, progress: bool) -> CsrEdges:
    """The file's edges in CSR order: as stored when they are (checked in one pass), else sorted by
    (destination, source) through ``runs`` into two int32 files in the runs' folder."""
    src, dst, n = data.arrays["src"], data.arrays["dst"], data.num_nodes
    degree, in_order, last = np.zeros((n, 2), dtype=np.int64), True, -1
    for lo in _bar(range(0, src.size, chunk_edges), progress, "reading edges"):
        s, d = np.asarray(src[lo : lo + chunk_edges], np.int64), np.asarray(dst[lo : lo + chunk_edges], np.int64)
        for name, ids in (("src", s), ("dst", d)):
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
                raise ValueError(f"{data.path}: an id of '{name}' in edges [{lo}, {lo + s.size}) is outside [0, {n})")
        degrees(s, d, n, out=degree)
        release_pages(src), release_pages(dst)
        in_order = in_order and bool(d.size == 0 or (d[0] >= last and (np.diff(d) >= 0).all()))
        last = int(d[-1]) if d.size else last
    if in_order:
        return CsrEdges(src=src, dst=dst, degree=degree)
    return _sorted_edges(data, runs, degree, chunk_edges, progress)


def _sorted_edges(data: DatasetFile, runs: SortedRuns, degree, chunk_edges: int, progress: bool) -> CsrEdges:
    """The edges as sorted runs of keys dst * N + src, merged into int32 src/dst files beside the runs."""
    src, dst, n = data.arrays["src"], data.arrays["dst"], data.num_nodes
    for lo in _bar(range(0, src.size, chunk_edges), progress, "sorting edges"):
        runs.add(
            np.asarray(dst[lo : lo + chunk_edges], np.int64) * n + np.asarray(src[lo : lo + chunk_edges], np.int64)
        )
    out = {
        name: np.lib.format.open_memmap(os.path.join(runs.folder, f"{name}.npy"), "w+", np.int32, (src.size,))
        for name in ("src", "dst")
    }
    pos = 0
    for keys in _bar(runs.merge(), progress, "merging runs"):
        out["dst"][pos : pos + keys.size], out["src"][pos : pos + keys.size] = np.divmod(keys, n)
        pos += keys.size
        release_pages(out["dst"]), release_pages(out["src"])
    return CsrEdges(src=out["src"], dst=out["dst"], degree=degree)


def _write_parts(files: StoreFiles, data, edges: CsrEdges, node_ranges, chunk_edges: int, progress: bool) -> dict:
    """Every part's arrays; the quality figures (part_nodes, part_edges, halo_sizes, send_sizes, cut_edges)."""
    n, rowptr = data.num_nodes, edges.rowptr
    remote = np.zeros(n, dtype=bool)
    send = np.zeros(len(node_ranges), dtype=np.int64)
    figures = {"part_nodes": [], "part_edges": [], "halo_sizes": [], "cut_edges": 0}
    for r, (start, end) in enumerate(_bar(node_ranges.tolist(), progress, "writing parts")):
        folder = part_dir_name(r)
        os.makedirs(os.path.join(files.out_dir, folder))
        lo, hi = int(rowptr[start]), int(rowptr[end])
        files.save(f"{folder}/rowptr.npy", rowptr[start : end + 1] - lo)
        col = np.lib.format.open_memmap(os.path.join(files.out_dir, folder, "col.npy"), "w+", np.int32, (hi - lo,))
        remote[:] = False
        for a in range(lo, hi, chunk_edges):
            piece = np.asarray(edges.src[a : min(hi, a + chunk_edges)])
            col[a - lo : a - lo + piece.size] = piece
            outside = piece[(piece < start) | (piece >= end)]
            figures["cut_edges"] += int(outside.size)
            remote[outside] = True
            release_pages(edges.src), release_pages(col)
        col.flush()
        del col
        files.record(f"{folder}/col.npy")
        _copy_rows(files, f"{folder}/x.npy", data.arrays["x"], start, end, np.float32, chunk_edges)
        files.save(f"{folder}/y.npy", np.asarray(data.arrays["y"][start:end], dtype=np.int64))
        for mask in ("train_mask", "val_mask", "test_mask"):
            files.save(f"{folder}/{mask}.npy", np.asarray(data.arrays[mask][start:end], dtype=bool))
        halo = np.flatnonzero(remote).astype(np.int32)
        files.save(f"{folder}/halo.npy", halo)
        files.save(f"{folder}/degree.npy", edges.degree[start:end])
        send += np.bincount(np.searchsorted(node_ranges[:, 1], halo, side="right"), minlength=len(node_ranges))
        figures["part_nodes"].append(end - start)
        figures["part_edges"].append(hi - lo)
        figures["halo_sizes"].append(int(halo.size))
    return {**figures, "send_sizes": send.astype(int).tolist()}


def _copy_rows(files: StoreFiles, relpath: str, source, start: int, end: int, dtype, chunk_values: int) -> None:
    """Rows [start, end) of ``source`` [N, F] into a new .npy, about ``chunk_values`` values at a time."""
    shape = (end - start, *source.shape[1:])
    target = np.lib.format.open_memmap(os.path.join(files.out_dir, relpath), "w+", dtype, shape)
    step = max(1, chunk_values // max(1, int(np.prod(source.shape[1:]))))
    for lo in range(start, end, step):
        target[lo - start : min(end, lo + step) - start] = source[lo : min(end, lo + step)]
        release_pages(source), release_pages(target)
    target.flush()
    del target
    files.record(relpath)


def _bar(items, enabled: bool, desc: str):
    if not enabled:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="step")
