"""The graph-parallel process group as an explicit object, its row split, and the communication counters.

Every rank of the job is in the graph-parallel group (it spans the DeepSpeed data-parallel group
too: all ranks hold the same parameters). The group owns the node split (``RowSplit``): rank r holds
the contiguous global rows [starts[r], starts[r+1]). Nothing else computes a rank's rows.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from dsgraph.graph.split import RowSplit


class _WallTimer:
    """Host time of a synchronous collective (gloo on CPU returns when the data has arrived)."""

    def __init__(self):
        self.start = time.perf_counter()

    def seconds(self) -> float:
        return self.elapsed

    def stop(self) -> None:
        self.elapsed = time.perf_counter() - self.start


class _CudaTimer:
    """Stream time of a collective between two CUDA events: nothing synchronises the device while
    training runs, so communication can overlap compute; ``seconds`` waits for the end event."""

    def __init__(self, device: torch.device):
        self.begin, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.begin.record(torch.cuda.current_stream(device))

    def stop(self) -> None:
        self.end.record()

    def seconds(self) -> float:
        self.end.synchronize()
        return self.begin.elapsed_time(self.end) / 1e3


@dataclass
class CommStats:
    """Time and bytes sent by this rank through dsgraph's collectives (forward and backward).

    ``time_s`` of CUDA collectives is read from events when asked for (after the step), so counting
    never synchronises the device inside a step."""

    bytes_sent: int = 0
    calls: int = 0
    _host_s: float = 0.0
    _timers: list = field(default_factory=list)

    def reset(self) -> None:
        self.bytes_sent, self.calls, self._host_s, self._timers = 0, 0, 0.0, []

    @property
    def time_s(self) -> float:
        return self._host_s + sum(t.seconds() for t in self._timers)

    def add_time(self, seconds: float) -> None:
        """Host seconds spent waiting on communication outside ``record`` (an async wait)."""
        self._host_s += seconds

    def count(self, bytes_sent: int) -> None:
        self.bytes_sent += bytes_sent
        self.calls += 1

    @contextmanager
    def record(self, tensor: torch.Tensor, bytes_sent: int, name: str = "collective"):
        """Times and counts one collective; ``name`` labels its region in profiler traces
        (``dsgraph/comm/<name>``)."""
        timer = _CudaTimer(tensor.device) if tensor.is_cuda else _WallTimer()
        with torch.profiler.record_function(f"dsgraph/comm/{name}"):
            yield
        timer.stop()
        if tensor.is_cuda:
            self._timers.append(timer)
        else:
            self._host_s += timer.seconds()
        self.count(bytes_sent)


@dataclass
class GraphParallelGroup:
    """A process group, this rank's place in it and the row split. ``group`` is None for one rank."""

    rank: int = 0
    world_size: int = 1
    group: Any = None
    stats: CommStats = field(default_factory=CommStats)
    split: RowSplit | None = None

    @classmethod
    def from_world(cls) -> GraphParallelGroup:
        """All ranks of an initialised deepspeed.comm world, in a group of their own."""
        import deepspeed.comm as dist

        if not dist.is_initialized():
            return cls()
        world = dist.get_world_size()
        if world == 1:
            return cls()
        return cls(rank=dist.get_rank(), world_size=world, group=dist.new_group(list(range(world))))

    @classmethod
    def single(cls, num_rows: int) -> GraphParallelGroup:
        """A one-rank group over ``num_rows`` rows (a graph held whole by one rank)."""
        return cls(split=RowSplit((num_rows,)))

    def with_split(self, split: RowSplit) -> GraphParallelGroup:
        """This group (same process group and counters) with ``split`` as its row split."""
        if split.world_size != self.world_size:
            raise ValueError(f"a row split over {split.world_size} ranks for a group of {self.world_size}")
        return dataclasses.replace(self, split=split)

    @property
    def counts(self) -> list[int]:
        return list(self._split().counts)

    @property
    def starts(self) -> list[int]:
        return self._split().starts

    @property
    def rows(self) -> tuple[int, int]:
        """This rank's global row range [start, end)."""
        return self._split().range(self.rank)

    @property
    def num_rows(self) -> int:
        return sum(self._split().counts)

    def _split(self) -> RowSplit:
        if self.split is None:
            raise ValueError("this process group has no row split yet (GraphParallelGroup.with_split)")
        return self.split
