"""Helpers shared by the benchmarks in tools/ (bench_kernels.py, bench_models.py): device
synchronisation, peak memory of a call, out-of-memory as a result, and JSON results files.

Peak memory: on a GPU torch's allocator statistics; on the CPU the process's resident-set
high-water mark (VmHWM), reset just before the call through /proc/self/clear_refs so numpy, numba
and torch allocations all count. Kept here, beside the tools, so the benchmarks depend only on
dsgraph's public API.
"""

from __future__ import annotations

import json
import os
from typing import Callable

import torch


def sync(device: torch.device) -> None:
    """Waits for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cpu_peak_supported() -> bool:
    """True when this Linux kernel lets a process reset its own RSS high-water mark."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_kb("VmHWM") >= 0
    except OSError:
        return False


def peak_extra_bytes(fn: Callable[[], object], device: torch.device) -> tuple[object, int]:
    """Runs ``fn()`` and returns (its result, the peak memory above the level before the call)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        torch.cuda.synchronize(device)
        return result, torch.cuda.max_memory_allocated(device) - base
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    base_kb = _status_kb("VmRSS")
    result = fn()
    return result, max(0, _status_kb("VmHWM") - base_kb) * 1024


def process_peak_bytes(device: torch.device) -> int:
    """The process's peak memory so far: allocated by torch on a GPU, resident set on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return _status_kb("VmHWM") * 1024


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}")


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
