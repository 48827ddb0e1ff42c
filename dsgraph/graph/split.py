"""How a graph's rows split over ranks: contiguous ranges, one per rank (``RowSplit``).

The process group holds the split of a run (``GraphParallelGroup.split``); this module only says
what a split is and which one a run uses by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class RowSplit:
    """Contiguous rows per rank: rank r owns [starts[r], starts[r] + counts[r])."""

    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.counts or any(c < 0 for c in self.counts):
            raise ValueError(f"a row split needs one non-negative count per rank, got {list(self.counts)}")

    @classmethod
    def even(cls, num_rows: int, world_size: int) -> "RowSplit":
        """The first ``num_rows % P`` ranks get one row more than the others."""
        base, extra = divmod(num_rows, world_size)
        return cls(tuple(base + (r < extra) for r in range(world_size)))

    @classmethod
    def from_starts(cls, starts) -> "RowSplit":
        starts = [int(s) for s in starts]
        return cls(tuple(b - a for a, b in zip(starts[:-1], starts[1:])))

    @property
    def world_size(self) -> int:
        return len(self.counts)

    @property
    def num_rows(self) -> int:
        return sum(self.counts)

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


def default_row_split(rowptr: torch.Tensor, world_size: int) -> RowSplit:
    """The split a run uses when no partition decides it."""
    return RowSplit.even(rowptr.numel() - 1, world_size)
