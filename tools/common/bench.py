"""Helpers shared by the benchmarks in tools/ (bench_kernels.py, bench_models.py): device
synchronisation, peak memory of a call, out-of-memory as a result, and JSON results files.

Peak memory comes from tools/common/peak_memory.py (re-exported here): on a GPU torch's allocator
statistics, on the CPU the process's resident-set high-water mark.
"""

from __future__ import annotations

import json
import os

import torch

# re-exported: the benchmarks import these from here
from tools.common.peak_memory import cpu_peak_supported, peak_extra_bytes, process_peak_bytes  # noqa: F401


def sync(device: torch.device) -> None:
    """Waits for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def is_out_of_memory(err: BaseException) -> bool:
    """True for torch's out-of-memory errors (CUDA's, or a failed CPU allocation)."""
    if isinstance(err, torch.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and "out of memory" in str(err).lower()


def release(device: torch.device) -> None:
    """Returns cached blocks after an out-of-memory error, so the next case starts clean."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def device_label(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU, {torch.get_num_threads()} threads"


def write_json(path: str | None, payload: dict) -> None:
    """Writes ``payload`` to ``path`` (no-op when path is None), creating its folder."""
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=1)
        f.write("\n")
