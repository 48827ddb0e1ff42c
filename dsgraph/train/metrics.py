"""Metrics: one JSON object per line (per step and per evaluation), mirrored to TensorBoard.

Rank 0 writes. TensorBoard scalars go through DeepSpeed's monitor (``engine.monitor``), which
does not log the training loss itself; tags are ``dsgraph/<kind>/<key>``.
"""

from __future__ import annotations

import json
import os
import resource

import torch

STEP_KEYS = (
    "kind", "epoch", "step", "loss", "train_acc", "val_acc", "test_acc", "strategy", "world_size",
    "step_time_s", "comm_time_s", "comm_bytes", "peak_mem_mb",
)  # fmt: skip


def peak_memory_mb(device: torch.device) -> float:
    """Peak accelerator memory allocated by torch (GPU), or this process's peak RSS (CPU), in MB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


class MetricsWriter:
    def __init__(self, path: str | None, monitor=None, rank: int = 0, append: bool = False):
        self.rank, self.monitor = rank, monitor
        self.file = None
        if path and rank == 0:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self.file = open(path, "a" if append else "w")

    def write(self, row: dict) -> None:
        if self.rank != 0:
            return
        if self.file is not None:
            self.file.write(json.dumps(row) + "\n")
            self.file.flush()
        if self.monitor is not None and self.monitor.enabled:
            events = [
                (f"dsgraph/{row['kind']}/{key}", float(value), row["step"])
                for key, value in row.items()
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in ("step",)
            ]
            self.monitor.write_events(events)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
