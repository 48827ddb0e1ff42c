"""R-MAT graphs larger than memory: generated block by block straight into a dataset ``.npz``.

The same model as ``rmat.py`` (Graph500 quadrants, planted communities from the top id bits, noisy
class-centroid features, randomly permuted ids, a 30/20/50 split), drawn from other random streams,
so that no step needs the whole graph in memory:

- edges come in logical blocks of ``BLOCK_EDGES``; block b is drawn from its own stream
  (seed, b), so the graph is the same for one seed whatever the working chunk (a multiple of blocks);
- each chunk's edges, self loops dropped and ids permuted, become int64 keys ``dst << SCALE | src``,
  sorted and deduplicated into a run on disk; a k-way merge of the runs (``external_sort.py``)
  yields every distinct edge once, in CSR order (by destination, sources ascending);
- features, labels and masks are drawn per block of ``NODE_BLOCK`` nodes and written as they are made.

Ids are int32 in the file. Memory is a few N-sized arrays (the permutation, labels) plus one chunk;
disk is the file plus the runs (8 bytes per generated edge) while it is built.

``streamed(spec)`` says which specs go this way (the plain single-label spec asking for at least
``STREAM_EDGES`` edges): smaller graphs and the planted-task variants keep ``rmat.rmat_graph``'s
in-memory generator, whose graphs (and every loss measured on them) stay as they were.
"""

from __future__ import annotations

import os

import numpy as np

from dsgraph.graph.external_sort import SortedRuns
from dsgraph.graph.npz_map import release_pages
from dsgraph.graph.npz_stream import NpzWriter
from dsgraph.graph.rmat import (
    COMMUNITY_BITS,
    FEATURE_SIGNAL,
    NUM_FEATURES,
    A,
    B,
    C,
    parse_rmat_spec,
    rmat_edge_types,
    rmat_labels,
    rmat_regression,
    rmat_structural,
)

STREAM_VERSION = 1  # part of cached files' names (datasets.py): bump when the streamed graph changes
STREAM_EDGES = 1 << 25  # requested edges from which a plain spec is streamed (rmat:21 and up)
BLOCK_EDGES = 1 << 20  # the logical edge block: its stream depends on (seed, block), never on the chunk
NODE_BLOCK = 1 << 16  # nodes per feature block (likewise)
CHUNK_EDGES = 1 << 23  # default working chunk: ~0.4 GB of temporaries
EDGE_STREAM, NODE_STREAM, PERM_STREAM, CENTROID_STREAM = 1, 2, 3, 4  # tags of the independent streams


def plain(spec: str) -> bool:
    """Whether ``spec`` is a plain 'rmat:SCALE[:EDGE_FACTOR]' (no planted-task variant)."""
    variant = rmat_labels(spec) or rmat_edge_types(spec) or rmat_structural(spec) or rmat_regression(spec)
    return spec.startswith("rmat:") and not variant


def streamed(spec: str) -> bool:
    """Whether ``spec`` is built out of core (module docstring)."""
    if not plain(spec):
        return False
    scale, edge_factor = parse_rmat_spec(spec)
    return edge_factor << scale >= STREAM_EDGES


def block_edges(scale: int, seed: int, block: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw (pre-permutation) R-MAT edges of logical block ``block``: (src, dst) int64 [count]."""
    rng = np.random.default_rng([seed, EDGE_STREAM, block])
    src = np.zeros(count, dtype=np.int64)
    dst = np.zeros(count, dtype=np.int64)
    for bit in range(scale - 1, -1, -1):
        r = rng.random(count, dtype=np.float32)
        src |= (r >= A + B).astype(np.int64) << bit  # quadrants c and d
        dst |= (((r >= A) & (r < A + B)) | (r >= A + B + C)).astype(np.int64) << bit  # quadrants b and d
    return src, dst


def permutation(scale: int, seed: int) -> np.ndarray:
    """Old id -> new id, int32 [N] (int64 from 2^31 nodes)."""
    n = 1 << scale
    perm = np.random.default_rng([seed, PERM_STREAM]).permutation(n)
    return perm.astype(np.int32) if n < 2**31 else perm


def sorted_runs(
    scale: int, edge_factor: int, seed: int, perm: np.ndarray, runs: SortedRuns, chunk_edges: int, bar=None
) -> None:
    """Every logical block's edges as permuted keys ``dst << scale | src``, in sorted, deduplicated runs
    of ``chunk_edges`` (rounded to whole blocks) edges."""
    total = edge_factor << scale
    per_chunk = max(1, chunk_edges // BLOCK_EDGES)
    num_blocks = -(-total // BLOCK_EDGES)
    for first in range(0, num_blocks, per_chunk):
        keys = []
        for b in range(first, min(first + per_chunk, num_blocks)):
            src, dst = block_edges(scale, seed, b, min(BLOCK_EDGES, total - b * BLOCK_EDGES))
            keep = src != dst
            new_src, new_dst = perm[src[keep]].astype(np.int64), perm[dst[keep]].astype(np.int64)
            del src, dst, keep
            keys.append((new_dst << scale) | new_src)
            if bar is not None:
                bar.update(min(BLOCK_EDGES, total - b * BLOCK_EDGES))
        runs.add(np.concatenate(keys), dedup=True)


def write_rmat_npz(
    spec: str,
    seed: int,
    path: str | os.PathLike,
    *,
    chunk_edges: int = CHUNK_EDGES,
    scratch: str | None = None,
    progress: bool = False,
) -> int:
    """Writes R-MAT ``spec`` (a plain spec: 'rmat:SCALE[:EF]') to the dataset .npz ``path`` out of core;
    ``scratch``: the folder for the sorted runs (default: beside ``path``). Returns the edge count."""
    if not plain(spec):
        raise ValueError(f"dataset '{spec}': only plain rmat:SCALE[:EDGE_FACTOR] specs are built out of core")
    scale, edge_factor = parse_rmat_spec(spec)
    path = os.fspath(path)
    perm = permutation(scale, seed)
    with SortedRuns(scratch or os.path.dirname(os.path.abspath(path))) as runs:
        with _bar(progress, edge_factor << scale, f"{spec}: generating edges", "edge") as bar:
            sorted_runs(scale, edge_factor, seed, perm, runs, chunk_edges, bar)
        keys_path = os.path.join(runs.folder, "keys.bin")
        num_edges = _merge_to_file(runs, keys_path, progress, spec)
        for old in runs.paths:
            os.remove(old)
        keys = np.memmap(keys_path, dtype=np.int64, mode="r") if num_edges else np.zeros(0, np.int64)
        with NpzWriter(path) as npz:
            _write_edges(npz, keys, scale, chunk_edges, progress, spec)
            del keys
            _write_nodes(npz, scale, seed, perm, progress, spec)
    return num_edges


def _merge_to_file(runs: SortedRuns, keys_path: str, progress: bool, spec: str) -> int:
    """The merged, deduplicated keys into a raw int64 file; their count."""
    count = 0
    with open(keys_path, "wb") as out, _bar(progress, runs.num_keys, f"{spec}: merging runs", "key") as bar:
        for chunk in runs.merge(dedup=True):
            chunk.tofile(out)
            count += int(chunk.size)
            if bar is not None:
                bar.update(int(chunk.size))
    return count


def _write_edges(npz: NpzWriter, keys: np.ndarray, scale: int, chunk: int, progress: bool, spec: str) -> None:
    """Members src and dst (int32 [E], CSR order) from the merged keys, one chunk at a time."""
    mask = (1 << scale) - 1
    dtype = np.int32 if scale < 31 else np.int64
    for name in ("src", "dst"):
        with (
            npz.member(name, dtype, (keys.size,)) as stream,
            _bar(progress, keys.size, f"{spec}: {name}", "edge") as bar,
        ):
            for lo in range(0, keys.size, chunk):
                piece = np.asarray(keys[lo : lo + chunk])
                stream.write(piece & mask if name == "src" else piece >> scale)
                release_pages(keys)
                if bar is not None:
                    bar.update(piece.size)


def _write_nodes(npz: NpzWriter, scale: int, seed: int, perm: np.ndarray, progress: bool, spec: str) -> None:
    """Members x (written block by block), y and the three masks."""
    n = 1 << scale
    y = np.empty(n, dtype=np.int64)
    y[perm] = np.arange(n, dtype=np.int64) >> (scale - COMMUNITY_BITS)  # planted communities of the old ids
    centroids = np.random.default_rng([seed, CENTROID_STREAM]).standard_normal(
        (1 << COMMUNITY_BITS, NUM_FEATURES), dtype=np.float32
    )
    split = np.empty(n, dtype=np.float32)
    with (
        npz.member("x", np.float32, (n, NUM_FEATURES)) as stream,
        _bar(progress, n, f"{spec}: features", "node") as bar,
    ):
        for lo in range(0, n, NODE_BLOCK):
            hi = min(n, lo + NODE_BLOCK)
            rng = np.random.default_rng([seed, NODE_STREAM, lo // NODE_BLOCK])
            noise = rng.standard_normal((hi - lo, NUM_FEATURES), dtype=np.float32)
            stream.write(FEATURE_SIGNAL * centroids[y[lo:hi]] + noise)
            split[lo:hi] = rng.random(hi - lo, dtype=np.float32)
            if bar is not None:
                bar.update(hi - lo)
    npz.array("y", y)
    npz.array("train_mask", split < 0.3)
    npz.array("val_mask", (split >= 0.3) & (split < 0.5))
    npz.array("test_mask", split >= 0.5)


class _NoBar:
    def __enter__(self):
        return None

    def __exit__(self, *exc) -> None:
        return None


def _bar(enabled: bool, total: int, desc: str, unit: str):
    """A tqdm bar (a context manager) when ``enabled``, else one that yields None."""
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True)
