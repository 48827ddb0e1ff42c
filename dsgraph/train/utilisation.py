"""Utilisation per rank: process CPU time over wall time, and on a GPU the SM utilisation and
memory used that NVML reports (``nvidia-ml-py``, imported as ``pynvml``; optional).

NVML is read by a background thread every ``interval_s`` so that the training step never waits
for it; ``Utilisation.sample()`` (at the end of an epoch) returns the figures since the last
sample: ``cpu_util`` (1.0 = one core busy all the time; threads add up), ``gpu_sm_util`` (mean
percent of time a kernel ran, NVML's ``utilization.gpu``) and ``gpu_mem_used_mb`` (the most seen).
"""

from __future__ import annotations

import threading
import time

import torch


def nvml_bus_id(device: torch.device) -> str:
    """The PCI bus id NVML knows ``device`` by (NVML's indices ignore CUDA_VISIBLE_DEVICES)."""
    props = torch.cuda.get_device_properties(device)
    return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"


class NvmlSampler:
    """A daemon thread that reads one device's SM utilisation and memory used every ``interval_s``."""

    def __init__(self, nvml, handle, interval_s: float = 0.5):
        self.nvml, self.handle, self.interval_s = nvml, handle, interval_s
        self.lock = threading.Lock()
        self.util: list[float] = []
        self.mem_mb: list[float] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="dsgraph-nvml", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        util = float(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
        mem = self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used / 2**20
        with self.lock:
            self.util.append(util)
            self.mem_mb.append(mem)

    def _run(self) -> None:
        self._read()
        while not self.stop_event.wait(self.interval_s):
            self._read()

    def take(self) -> dict:
        """Mean SM utilisation and most memory used since the last ``take`` (empty before a reading)."""
        with self.lock:
            util, mem, self.util, self.mem_mb = self.util, self.mem_mb, [], []
        if not util:
            return {}
        return {"gpu_sm_util": sum(util) / len(util), "gpu_mem_used_mb": max(mem)}

    def close(self) -> None:
        self.stop_event.set()
        self.thread.join()
        self.nvml.nvmlShutdown()


def open_nvml(device: torch.device, interval_s: float = 0.5) -> NvmlSampler | None:
    """An NVML sampler for ``device``, or None on CPU or where ``pynvml`` (nvidia-ml-py) is missing."""
    if device.type != "cuda":
        return None
    try:
        import pynvml
    except ImportError:
        return None
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByPciBusId(nvml_bus_id(device))
    return NvmlSampler(pynvml, handle, interval_s)


class Utilisation:
    """This rank's utilisation figures between calls of ``sample``."""

    def __init__(self, device: torch.device, nvml: NvmlSampler | None = None):
        self.nvml = nvml if nvml is not None else open_nvml(device)
        self.cpu, self.wall = time.process_time(), time.perf_counter()

    def sample(self) -> dict:
        cpu, wall = time.process_time(), time.perf_counter()
        out = {"cpu_util": (cpu - self.cpu) / max(wall - self.wall, 1e-9)}
        self.cpu, self.wall = cpu, wall
        if self.nvml is not None:
            out.update(self.nvml.take())
        return out

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None
