"""``--trace-steps A:B``: torch.profiler traces of training steps A..B-1 on every rank.

Each rank writes one trace file through ``tensorboard_trace_handler`` (``worker_name=rank<r>``,
``rank<r>.<time>.pt.trace.json``) into the trace folder: by default the run's own TensorBoard folder
(``<output_path>/<run name>``), where the PyTorch Profiler plugin of TensorBoard (torch-tb-profiler)
finds it and shows the run in its PYTORCH_PROFILER tab, one worker per rank; ``--trace-dir`` puts it
elsewhere (for Perfetto, https://ui.perfetto.dev, "Open trace file", or chrome://tracing).
Named regions: ``dsgraph/step/<epoch>``, ``dsgraph/comm/<collective>`` (all_gather,
reduce_scatter, all_to_all, ring_shift, and ``wait`` where an asynchronous exchange is waited for)
and ``dsgraph/attention/<backend>`` (the local kernel; ``<backend>_forward`` / ``<backend>_backward``
for the separate passes of blockwise strategies).
After the last traced step each rank reads its trace back for the per-step figures of
``dsgraph.train.trace_figures`` (``figures``).
"""

from __future__ import annotations

import glob
import os

import torch

from dsgraph.train.config import parse_trace_steps
from dsgraph.train.trace_figures import load_events, step_figures


class StepTracer:
    """Starts the profiler before step A and stops it (writing the trace) after step B-1."""

    def __init__(self, spec: str | None, trace_dir: str, rank: int):
        self.window = parse_trace_steps(spec) if spec else None
        self.trace_dir, self.rank = trace_dir, rank
        self.profiler = None
        self.region = None
        self.steps: list[tuple[int, int]] = []  # (epoch, global step) of each traced step, in order
        self.figures: list[dict] | None = None  # after the trace is written: one dict per traced step

    def begin(self, epoch: int, global_step: int = 0) -> None:
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
        self.steps.append((epoch, global_step))
        self.region = torch.profiler.record_function(f"dsgraph/step/{epoch}")
        self.region.__enter__()

    def end(self, epoch: int, ends_epoch: bool = True) -> bool:
        """After a step of ``epoch``; the trace is written after the last step of epoch B-1.
        True when it was written just now (``figures`` then holds the traced steps' figures)."""
        if self.region is not None:
            self.region.__exit__(None, None, None)
            self.region = None
        if self.profiler is not None and ends_epoch and epoch + 1 >= self.window[1]:
            self.close()
            figures = step_figures(load_events(self.path()))
            self.figures = [{"epoch": e, "step": s, **f} for (e, s), f in zip(self.steps, figures)]
            return True
        return False

    def path(self) -> str:
        """This rank's newest trace file in the trace folder."""
        files = glob.glob(os.path.join(self.trace_dir, f"rank{self.rank}.*.pt.trace.json*"))
        if not files:
            raise FileNotFoundError(f"{self.trace_dir}: the profiler wrote no rank{self.rank}.*.pt.trace.json")
        return max(files, key=os.path.getmtime)

    def close(self) -> None:
        """Stops the profiler (writes the trace) if it is running."""
        if self.profiler is not None:
            self.profiler.stop()
            self.profiler = None
