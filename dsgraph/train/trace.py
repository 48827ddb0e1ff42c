"""``--trace-steps A:B``: torch.profiler traces of training steps A..B-1 on every rank.

Each rank writes one trace file through ``tensorboard_trace_handler`` (``worker_name=rank<r>``)
into the trace folder. Named regions: ``dsgraph/step``, ``dsgraph/comm/<collective>`` (all_gather,
reduce_scatter, all_to_all, ring_shift, and ``wait`` where an asynchronous exchange is waited for)
and ``dsgraph/attention/<backend>`` (the local kernel; ``<backend>_forward`` / ``<backend>_backward``
for the separate passes of blockwise strategies).
Open a ``*.pt.trace.json`` file in https://ui.perfetto.dev (or chrome://tracing), or point
TensorBoard with the torch-tb-profiler plugin at the folder.
"""

from __future__ import annotations

import os

import torch

from dsgraph.train.config import parse_trace_steps


class StepTracer:
    """Starts the profiler before step A and stops it (writing the trace) after step B-1."""

    def __init__(self, spec: str | None, trace_dir: str, rank: int):
        self.window = parse_trace_steps(spec) if spec else None
        self.trace_dir, self.rank = trace_dir, rank
        self.profiler = None
        self.region = None

    def begin(self, epoch: int) -> None:
        if self.window is None or not self.window[0] <= epoch < self.window[1]:
            return
        if self.profiler is None:
            os.makedirs(self.trace_dir, exist_ok=True)
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            handler = torch.profiler.tensorboard_trace_handler(self.trace_dir, worker_name=f"rank{self.rank}")
            self.profiler = torch.profiler.profile(activities=activities, on_trace_ready=handler)
            self.profiler.start()
        self.region = torch.profiler.record_function(f"dsgraph/step/{epoch}")
        self.region.__enter__()

    def end(self, epoch: int, ends_epoch: bool = True) -> None:
        """After a step of ``epoch``; the trace is written after the last step of epoch B-1."""
        if self.region is not None:
            self.region.__exit__(None, None, None)
            self.region = None
        if self.profiler is not None and ends_epoch and epoch + 1 >= self.window[1]:
            self.close()

    def close(self) -> None:
        """Stops the profiler (writes the trace) if it is running."""
        if self.profiler is not None:
            self.profiler.stop()
            self.profiler = None
