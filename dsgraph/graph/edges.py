"""Edge clean-up and CSR construction for large edge arrays, in a few passes over int64 keys.

Every edge src -> dst becomes the key ``dst * N + src``; sorting the keys in place orders edges by
destination, then source, which is exactly the CSR by destination (``rowptr`` from the row starts,
``col = key % N``). Symmetrizing adds the reversed keys, deduplicating drops equal neighbours in the
sorted keys, and self loops are filtered while keys are written. All passes work on slices, so the
peak is the key array (8 bytes per output edge) plus ``col`` (4 bytes per edge); the caller drops
its ``src``/``dst`` once :func:`edge_keys` returns.

Edges with features need to know where each output edge came from: :func:`edge_keys_with_origin`
returns the keys with the input row of each (a stable argsort instead of the in-place sort, 8 more
bytes per edge), and :func:`dedup_with_origin` keeps the first of repeated edges in input order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CHUNK = 1 << 22


@dataclass(kw_only=True, slots=True)
class CleanupStats:
    """What :func:`edge_keys` and :func:`csr_from_keys` changed."""

    input_edges: int = 0
    self_loops_dropped: int = 0
    reverse_edges_added: int = 0
    duplicates_dropped: int = 0


def destination_order(dst: np.ndarray, src: np.ndarray, num_src: int) -> np.ndarray:
    """The permutation that sorts edges by destination, then source, equal edges in input order:
    ``np.lexsort((src, dst))``, computed as one stable argsort of the keys ``dst * num_src + src``
    (3.4x faster than lexsort on 16M edges). Ids must be >= 0, with ``src < num_src``."""
    keys = np.asarray(dst, dtype=np.int64) * num_src
    keys += src
    return np.argsort(keys, kind="stable")


def edge_keys(
    src: np.ndarray,
    dst: np.ndarray,
    num_nodes: int,
    *,
    symmetrize: bool = False,
    drop_self_loops: bool = False,
    stats: CleanupStats | None = None,
    chunk: int = CHUNK,
) -> np.ndarray:
    """Sorted int64 keys ``dst * num_nodes + src`` of the edges src -> dst.

    ``symmetrize`` adds v -> u for every edge u -> v that is not a self loop (self loops are not
    doubled); ``drop_self_loops`` leaves out edges u -> u. Ids must already lie in [0, num_nodes).
    """
    keys, _ = _keys(
        src, dst, num_nodes, symmetrize, drop_self_loops, stats if stats is not None else CleanupStats(), chunk, False
    )
    keys.sort()
    return keys


def edge_keys_with_origin(
    src,
    dst,
    num_nodes: int,
    *,
    symmetrize: bool = False,
    drop_self_loops: bool = False,
    stats: CleanupStats | None = None,
    chunk: int = CHUNK,
) -> tuple[np.ndarray, np.ndarray]:
    """``edge_keys`` and, for each key, the input edge it came from (int64; a reversed edge comes
    from the edge it reverses); equal keys keep their input order."""
    keys, origin = _keys(
        src, dst, num_nodes, symmetrize, drop_self_loops, stats if stats is not None else CleanupStats(), chunk, True
    )
    order = np.argsort(keys, kind="stable")
    return keys[order], origin[order]


def _keys(
    src,
    dst,
    num_nodes: int,
    symmetrize: bool,
    drop_self_loops: bool,
    stats: CleanupStats,
    chunk: int,
    with_origin: bool,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Unsorted keys (see ``edge_keys``) and, ``with_origin``, the input edge of each."""
    n = np.int64(num_nodes)
    total = len(src)
    stats.input_edges += total
    keys = np.empty(total * (2 if symmetrize else 1), dtype=np.int64)
    origin = np.empty(keys.size, dtype=np.int64) if with_origin else None
    filled = 0
    for start in range(0, total, chunk):
        s = src[start : start + chunk].astype(np.int64)
        d = dst[start : start + chunk].astype(np.int64)
        rows = np.arange(start, start + len(s), dtype=np.int64) if with_origin else None
        loop = s == d
        if drop_self_loops:
            stats.self_loops_dropped += int(loop.sum())
            s, d, rows = s[~loop], d[~loop], None if rows is None else rows[~loop]
            loop = np.zeros(len(s), dtype=bool)
        keys[filled : filled + len(s)] = d * n + s
        if with_origin:
            origin[filled : filled + len(s)] = rows
        filled += len(s)
        if symmetrize:
            keep = ~loop
            added = int(keep.sum())
            keys[filled : filled + added] = s[keep] * n + d[keep]
            if with_origin:
                origin[filled : filled + added] = rows[keep]
            filled += added
            stats.reverse_edges_added += added
    return keys[:filled], None if origin is None else origin[:filled]


def dedup_with_origin(
    keys: np.ndarray, origin: np.ndarray, stats: CleanupStats | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The first of every run of equal sorted ``keys`` (the first in input order, after
    ``edge_keys_with_origin``), with its origin."""
    keep = np.ones(keys.size, dtype=bool)
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    if stats is not None:
        stats.duplicates_dropped += int(keys.size - keep.sum())
    return keys[keep], origin[keep]


def csr_from_keys(
    keys: np.ndarray,
    num_nodes: int,
    *,
    dedup: bool = False,
    stats: CleanupStats | None = None,
    chunk: int = CHUNK,
) -> tuple[np.ndarray, np.ndarray]:
    """(rowptr int64 [N+1], col int32 [E]) from sorted keys; ``dedup`` keeps one copy of each edge.

    ``keys`` is compacted in place when deduplicating (its contents are consumed).
    """
    if dedup:
        kept = _dedup_sorted(keys, chunk)
        if stats is not None:
            stats.duplicates_dropped += len(keys) - kept
        keys = keys[:kept]
    n = np.int64(num_nodes)
    col = np.empty(len(keys), dtype=np.int32)
    for start in range(0, len(keys), chunk):
        col[start : start + chunk] = keys[start : start + chunk] % n
    rowptr = np.searchsorted(keys, np.arange(num_nodes + 1, dtype=np.int64) * n).astype(np.int64)
    return rowptr, col


def _dedup_sorted(keys: np.ndarray, chunk: int) -> int:
    """Moves the distinct values of sorted ``keys`` to its front; returns how many there are."""
    written = 0
    previous = None
    for start in range(0, len(keys), chunk):
        part = keys[start : start + chunk]
        keep = np.empty(len(part), dtype=bool)
        keep[0] = previous is None or part[0] != previous
        np.not_equal(part[1:], part[:-1], out=keep[1:])
        previous = part[-1].copy()
        distinct = part[keep]
        keys[written : written + len(distinct)] = distinct
        written += len(distinct)
    return written
