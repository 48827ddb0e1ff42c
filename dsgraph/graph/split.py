"""How a graph's rows split over ranks: contiguous ranges, one per rank (``RowSplit``).

The process group holds the split of a run (``GraphParallelGroup.split``); this module says what a
split is and computes the contiguous ones: equal node counts ('contiguous'), or boundaries that
equalise the in-edges, the attention work, per rank ('balanced'). Splits that relabel nodes first
(METIS, random) are partitions (``partition.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CONTIGUOUS_METHODS = ("contiguous", "balanced")


@dataclass(frozen=True, slots=True)
class RowSplit:
    """Contiguous rows per rank: rank r owns [starts[r], starts[r] + counts[r])."""

    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.counts or any(c < 0 for c in self.counts):
            raise ValueError(f"a row split needs one non-negative count per rank, got {list(self.counts)}")

    @classmethod
    def even(cls, num_rows: int, world_size: int) -> RowSplit:
        """The first ``num_rows % P`` ranks get one row more than the others."""
        base, extra = divmod(num_rows, world_size)
        return cls(tuple(base + (r < extra) for r in range(world_size)))

    @classmethod
    def from_starts(cls, starts) -> RowSplit:
        starts = [int(s) for s in starts]
        return cls(tuple(b - a for a, b in zip(starts[:-1], starts[1:])))

    @property
    def world_size(self) -> int:
        return len(self.counts)

    @property
    def starts(self) -> list[int]:
        """[P+1] row range boundaries."""
        out = [0]
        for c in self.counts:
            out.append(out[-1] + c)
        return out

    def range(self, rank: int) -> tuple[int, int]:
        start = self.starts[rank]
        return start, start + self.counts[rank]


def balanced_bounds(degree: np.ndarray, num_parts: int) -> np.ndarray:
    """Range boundaries [P+1] placing each cut where the in-edges before it are nearest to r/P of all.

    No range is left empty, so a hub heavier than 1/P of the edges makes its part the largest.
    """
    n = degree.size
    before = np.zeros(n + 1, dtype=np.int64)  # before[c] = in-edges of nodes [0, c)
    np.cumsum(degree, out=before[1:])
    targets = np.arange(1, num_parts, dtype=np.float64) * before[-1] / num_parts
    upper = np.clip(np.searchsorted(before, targets, side="left"), 1, n)  # first cut at or past the target
    lower = upper - 1
    nearer_lower = np.abs(before[lower] - targets) <= np.abs(before[upper] - targets)
    bounds = np.concatenate(([0], np.where(nearer_lower, lower, upper), [n])).astype(np.int64)
    for r in range(1, num_parts):  # keep every range non-empty and leave room for the rest
        bounds[r] = min(max(bounds[r], bounds[r - 1] + 1), n - (num_parts - r))
    return bounds


def contiguous_split(method: str, in_degrees, world_size: int) -> RowSplit:
    """A split of the rows in their given order: 'contiguous' (equal node counts) or 'balanced'
    (equal in-edges; ``in_degrees`` [N])."""
    degree = np.asarray(in_degrees)
    if method == "contiguous":
        return RowSplit.even(degree.size, world_size)
    if method == "balanced":
        return RowSplit.from_starts(
            balanced_bounds(degree, world_size)
            if degree.size >= world_size
            else RowSplit.even(degree.size, world_size).starts
        )
    raise ValueError(f"'{method}' is not a contiguous split; choose from {', '.join(CONTIGUOUS_METHODS)}")


def balance(split: RowSplit, in_degrees) -> tuple[float, float]:
    """(nodes, in-edges) of the largest part over the mean: 1.0 is perfect."""
    before = np.concatenate([[0], np.cumsum(np.asarray(in_degrees, dtype=np.int64))])
    starts = np.asarray(split.starts)
    edges = before[starts[1:]] - before[starts[:-1]]
    nodes = np.asarray(split.counts)
    mean = lambda a: a.mean() if a.size and a.mean() else 1.0  # noqa: E731
    return float(nodes.max() / mean(nodes)), float(edges.max() / mean(edges)) if edges.sum() else 1.0
