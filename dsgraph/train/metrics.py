"""Metrics: one JSON object per line (per step and per evaluation), mirrored to TensorBoard.

Rank 0 writes. TensorBoard scalars go through DeepSpeed's monitor (``engine.monitor``), which
does not log the training loss itself; tags are ``dsgraph/<kind>/<key>``.
"""

from __future__ import annotations

import json
import os
import resource
from dataclasses import dataclass, field

import torch

STEP_KEYS = (
    "kind",
    "epoch",
    "step",
    "loss",
    "train_acc",
    "val_acc",
    "test_acc",
    "strategy",
    "world_size",
    "step_time_s",
    "comm_time_s",
    "comm_bytes",
    "sync_bytes",
    "peak_mem_mb",
)


@dataclass(kw_only=True)
class Row:
    """One metrics row (a training step or an evaluation), the same for every mode and strategy;
    ``extra`` holds the columns a mode or strategy adds (sampling counts, AGP's decision, ...)."""

    kind: str
    epoch: int
    step: int
    loss: float
    train_acc: float
    val_acc: float | None = None
    test_acc: float | None = None
    strategy: str
    mode: str
    world_size: int
    step_time_s: float
    comm_time_s: float
    comm_bytes: int
    """Bytes this rank sent for activations (and a step's input, e.g. halo features)."""
    sync_bytes: int
    """Bytes this rank sent to synchronise the model: gradient reduction or parameter averaging."""
    peak_mem_mb: float
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "extra"}
        out.update(self.extra)
        return out


def peak_memory_mb(device: torch.device) -> float:
    """Peak accelerator memory allocated by torch (GPU), or this process's peak RSS (CPU), in MB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def per_rank_row(kind: str, epoch: int, step: int, figures: list[dict]) -> dict:
    """One row of every rank's figures (``figures[r]`` of rank r) as ``<key>/rank<r>`` columns, which
    TensorBoard shows as ``dsgraph/<kind>/<key>/rank<r>``, one chart per key and rank."""
    row = {"kind": kind, "epoch": epoch, "step": step}
    for rank, values in enumerate(figures):
        row.update({f"{key}/rank{rank}": value for key, value in values.items()})
    return row


class MetricsWriter:
    def __init__(self, path: str | None, monitor=None, rank: int = 0, append: bool = False):
        self.rank, self.monitor = rank, monitor
        self.file = None
        if path and rank == 0:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self.file = open(path, "a" if append else "w")

    def write(self, row: dict) -> None:
        """One JSON line; numbers also as TensorBoard scalars ``dsgraph/<kind>/<key>``. A row's
        ``text`` entry (tag, markdown) goes to TensorBoard as text ``dsgraph/<kind>/<tag>`` only."""
        if self.rank != 0:
            return
        row = dict(row)
        text = row.pop("text", None)
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
            writer = getattr(getattr(self.monitor, "tb_monitor", None), "summary_writer", None)
            if text is not None and writer is not None:
                writer.add_text(f"dsgraph/{row['kind']}/{text[0]}", text[1], row["step"])
                writer.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
