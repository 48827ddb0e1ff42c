"""Isolated training from a partition store, its peak memory per rank predicted before training:
a rank holds one chunk pair's subgraph at a time (``store_pairs.py``), so its peak is that of a
one-rank step on the largest pair it can meet, plus the next pair read ahead
(``agp.run_memory.predict_subgraph``).

The pair is counted, not estimated: the two parts with the most in-edges are read from the store
(memory-mapped, one pair's in-edges, no features) and cut as training cuts them: their rows, the
halo cache (the ``halo_fraction`` of the rows' most-read outside sources), the in-edges whose source
is a row or a halo row, and the self loops. Over a cycle every chunk meets every other, so the run
meets that pair; other pairs differ by how many of their in-edges stay inside.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from dsgraph.agp.run_memory import RunMemory, predict_subgraph
from dsgraph.graph.npz_map import release_pages
from dsgraph.graph.store import load_part, read_meta
from dsgraph.modes.isolated.chunks import BlockRows, halo_budget, halo_of_rows
from dsgraph.modes.isolated.store_pairs import part_csr


@dataclass(frozen=True)
class PairSize:
    chunks: tuple[int, int]
    rows: int  # the two parts' rows
    halo: int  # halo rows read besides them
    edges: int  # in-edges kept, self loops included


@dataclass(frozen=True)
class _Rows:
    """The row range and in-edges of a part (what ``BlockRows`` reads of a block)."""

    start: int
    end: int
    rowptr: np.ndarray
    col: np.ndarray


def _rows(store_dir: str, chunk: int, num_chunks: int, self_loops: bool) -> _Rows:
    part = load_part(store_dir, chunk, num_chunks, encodings=())
    rowptr, col = part_csr(part, self_loops)  # as ``StorePairs`` cuts it
    release_pages(part.rowptr)
    release_pages(part.col)
    return _Rows(part.start, part.end, rowptr, col)


@functools.lru_cache(maxsize=4)
def largest_pair(store_dir: str, halo_fraction: float, self_loops: bool) -> PairSize:
    """The subgraph sizes of the pair of the store's two parts with the most in-edges (counted once
    per process: the memory check before training and the metrics' prediction ask the same)."""
    meta = read_meta(store_dir)
    num_chunks = int(meta["num_parts"])
    by_edges = np.argsort(-np.asarray(meta["part_num_edges"], dtype=np.int64), kind="stable")
    chunks = tuple(sorted(int(c) for c in by_edges[:2]))
    rows = BlockRows([_rows(store_dir, c, num_chunks, self_loops) for c in chunks])
    halo = halo_of_rows(rows, halo_budget(rows.num_rows, halo_fraction))
    inside = rows.local_src >= 0
    from_halo = np.isin(rows.src[~inside], halo)
    loops = halo.size if self_loops else 0  # a halo row's only in-edge
    edges = int(inside.sum()) + int(from_halo.sum()) + loops
    return PairSize(chunks=chunks, rows=rows.num_rows, halo=int(halo.size), edges=edges)


def predict_isolated(cfg, dtype_bytes: int) -> RunMemory | None:
    """The run's predicted peak per rank, or None without a partition store (the in-memory path
    holds the whole graph on every rank and is not predicted)."""
    if cfg.partitions is None or cfg.model.reads_edges:
        return None
    meta = read_meta(cfg.partitions)
    pair = largest_pair(cfg.partitions, cfg.isolated.halo_fraction, cfg.adds_self_loops)
    a, b = pair.chunks
    return predict_subgraph(
        cfg,
        dtype_bytes,
        pair.rows + pair.halo,
        pair.edges,
        int(meta["num_features"]),
        int(meta["num_classes"]),
        f"store {cfg.partitions}: its largest pair, parts {a} and {b}, {pair.rows + pair.halo:,} rows "
        f"({pair.halo:,} halo), {pair.edges:,} in-edges",
        read_ahead=cfg.isolated.prefetch,
    )


def alternatives(cfg, predicted: RunMemory, limit_mb: float) -> list[str]:
    """What would fit: more chunks (a pair's rows halve with twice the parts, its in-edges halve or
    less, the process floor stays), and no read-ahead."""
    parts = int(read_meta(cfg.partitions)["num_parts"])
    fixed = predicted.terms["process floor"] + predicted.terms["optimizer states"]
    out = []
    for more in (2 * parts, 4 * parts, 8 * parts):
        scaled = (fixed + (predicted.total_bytes - fixed) * parts / more) / 2**20
        if scaled <= limit_mb:
            out.append(f"a store of {more} parts (dsgraph partition --parts {more}): about {scaled:,.0f} MB per rank")
            break
    without = predicted.total_mb - predicted.terms.get("read-ahead subgraph", 0.0) / 2**20
    if cfg.isolated.prefetch and without <= limit_mb:
        out.append(f'no read-ahead ("isolated": {{"prefetch": false}}): about {without:,.0f} MB per rank')
    return out or [f"a store of more than {8 * parts} parts"]
