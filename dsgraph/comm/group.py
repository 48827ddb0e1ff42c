"""The graph-parallel process group as an explicit object, and the communication counters.

Every rank of the job is in the graph-parallel group (it spans the DeepSpeed data-parallel group
too: all ranks hold the same parameters). The group owns the node split: rank r holds the
contiguous global rows [starts[r], starts[r+1]).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class CommStats:
    """Time and bytes sent by this rank through dsgraph's collectives (forward and backward)."""

    time_s: float = 0.0
    bytes_sent: int = 0
    calls: int = 0

    def reset(self) -> None:
        self.time_s, self.bytes_sent, self.calls = 0.0, 0, 0

    @contextmanager
    def record(self, tensor: torch.Tensor, bytes_sent: int, name: str = "collective"):
        """Times and counts one collective; ``name`` labels its region in profiler traces
        (``dsgraph/comm/<name>``)."""
        if tensor.is_cuda:
            torch.cuda.synchronize(tensor.device)
        start = time.perf_counter()
        with torch.profiler.record_function(f"dsgraph/comm/{name}"):
            yield
        if tensor.is_cuda:
            torch.cuda.synchronize(tensor.device)
        self.time_s += time.perf_counter() - start
        self.bytes_sent += bytes_sent
        self.calls += 1


@dataclass
class GraphParallelGroup:
    """A process group plus this rank's place in it. ``group`` is None for a one-rank run."""

    rank: int = 0
    world_size: int = 1
    group: Any = None
    stats: CommStats = field(default_factory=CommStats)

    @classmethod
    def from_world(cls) -> "GraphParallelGroup":
        """All ranks of an initialised deepspeed.comm world, in a group of their own."""
        import deepspeed.comm as dist

        if not dist.is_initialized():
            return cls()
        world = dist.get_world_size()
        if world == 1:
            return cls()
        return cls(rank=dist.get_rank(), world_size=world, group=dist.new_group(list(range(world))))


def even_row_counts(num_rows: int, world_size: int) -> list[int]:
    """Contiguous split of ``num_rows`` over ranks; the first ``num_rows % P`` ranks get one more."""
    base, extra = divmod(num_rows, world_size)
    return [base + (r < extra) for r in range(world_size)]


def row_starts(counts: list[int]) -> list[int]:
    starts = [0]
    for c in counts:
        starts.append(starts[-1] + c)
    return starts
