"""Peak memory of a call or of the process so far, for the benchmarks and the memory tests.

CUDA: torch's allocator statistics. CPU: the process's resident-set high-water mark (VmHWM), reset
just before the call through /proc/self/clear_refs, so numpy, numba and torch allocations all count.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


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
