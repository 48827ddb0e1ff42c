"""Sorting more int64 keys than memory holds: sorted runs on disk, then a k-way merge.

``SortedRuns.add`` sorts one batch of keys and writes it to its own ``.npy`` run in a scratch folder;
``SortedRuns.merge`` reads every run through a memory map and yields the keys in ascending order
(each one once with ``dedup``), one bounded chunk at a time. Memory is one batch while adding and
about ``MERGE_KEYS`` keys in all while merging (a window of them per run), whatever the total.

The merge takes a window of the next keys from every run; every key up to the smallest last key
of the windows of runs not yet exhausted is final (no run can still hold a smaller one), so those
keys are sorted, deduplicated and emitted, and each run advances past them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import numpy as np

from dsgraph.graph.npz_map import release_pages

MERGE_KEYS = 1 << 23  # keys read from all runs together per merge step (64 MB)
MIN_WINDOW = 1 << 12  # keys read from each run per merge step, at least


class SortedRuns:
    """Sorted runs of int64 keys in a scratch folder (removed by ``close`` or on leaving a ``with``)."""

    def __init__(self, scratch: str | None = None):
        self.folder = tempfile.mkdtemp(prefix="dsgraph-runs-", dir=scratch)
        self.paths: list[str] = []
        self.num_keys = 0

    def __enter__(self) -> SortedRuns:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def add(self, keys: np.ndarray, dedup: bool = False) -> None:
        """Sorts ``keys`` (int64, taken over: sorted in place) into a new run (deduplicated with ``dedup``)."""
        if keys.dtype != np.int64 or keys.ndim != 1:
            raise ValueError(f"sorted runs hold 1-D int64 keys, got {keys.dtype} {keys.shape}")
        keys.sort()
        if dedup:
            keys = _unique_sorted(keys)
        if not keys.size:
            return
        path = os.path.join(self.folder, f"run_{len(self.paths):06d}.npy")
        np.save(path, keys, allow_pickle=False)
        self.paths.append(path)
        self.num_keys += int(keys.size)

    def merge(self, dedup: bool = False, window: int | None = None) -> Iterator[np.ndarray]:
        """Every key of every run in ascending order (repeated keys once with ``dedup``), in chunks;
        ``window``: keys read from each run per step (default: ``MERGE_KEYS`` shared by the runs)."""
        window = window or max(MIN_WINDOW, MERGE_KEYS // max(1, len(self.paths)))
        return merge_sorted([np.load(p, mmap_mode="r") for p in self.paths], dedup=dedup, window=window)


def merge_sorted(runs: list[np.ndarray], dedup: bool = False, window: int = MIN_WINDOW) -> Iterator[np.ndarray]:
    """k-way merge of ascending 1-D arrays (memory maps are read ``window`` keys at a time)."""
    if window < 1:
        raise ValueError(f"merge window must be at least 1 key, got {window}")
    pos = [0] * len(runs)
    while True:
        live = [i for i, run in enumerate(runs) if pos[i] < run.size]
        if not live:
            return
        heads = {i: np.asarray(runs[i][pos[i] : pos[i] + window]) for i in live}
        unfinished = [heads[i][-1] for i in live if pos[i] + window < runs[i].size]
        bound = min(unfinished) if unfinished else None  # keys <= bound are final
        taken = []
        for i, head in heads.items():
            n = head.size if bound is None else int(np.searchsorted(head, bound, side="right"))
            taken.append(head[:n])
            pos[i] += n
            release_pages(runs[i])
        chunk = np.concatenate(taken)
        chunk.sort(kind="stable")
        yield _unique_sorted(chunk) if dedup else chunk


def _unique_sorted(keys: np.ndarray) -> np.ndarray:
    """The distinct values of an ascending array (``np.unique`` without its sort)."""
    if keys.size < 2:
        return keys
    keep = np.empty(keys.size, dtype=bool)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]
