"""Utilisation figures: CPU time over wall time, and NVML's (a fake NVML module here) in a background thread."""

import sys
import threading
import time
import types

import pytest
import torch

from dsgraph.train import utilisation
from dsgraph.train.metrics import per_rank_row
from dsgraph.train.utilisation import NvmlSampler, Utilisation


class FakeNvml:
    """The part of pynvml the sampler uses; ``gate`` holds a reading until the test releases it."""

    def __init__(self, utils, mem_mb):
        self.utils, self.mem_mb, self.calls, self.shut = list(utils), list(mem_mb), 0, False
        self.gate = threading.Event()
        self.gate.set()

    def nvmlDeviceGetUtilizationRates(self, handle):
        assert handle == "gpu0"
        self.gate.wait()
        self.calls += 1
        return types.SimpleNamespace(gpu=self.utils[min(self.calls, len(self.utils)) - 1])

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(used=self.mem_mb[min(self.calls, len(self.mem_mb)) - 1] * 2**20)

    def nvmlShutdown(self):
        self.shut = True


def _wait_for(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_cpu_util_is_process_time_over_wall_time():
    usage = Utilisation(torch.device("cpu"))
    cpu, wall = time.process_time(), time.perf_counter()
    while time.perf_counter() < wall + 0.3:  # busy (as much of a core as the machine gives it)
        pass
    expected = (time.process_time() - cpu) / (time.perf_counter() - wall)
    busy = usage.sample()["cpu_util"]
    time.sleep(0.3)  # asleep: about none
    idle = usage.sample()["cpu_util"]
    assert busy == pytest.approx(expected, abs=0.05) and expected > 0.05, (busy, expected)
    assert idle < busy / 5, (busy, idle)
    assert "gpu_sm_util" not in usage.sample()  # no NVML on CPU


def test_nvml_sampler_averages_util_keeps_the_most_memory_and_never_blocks_the_step():
    nvml = FakeNvml(utils=[20, 40, 90], mem_mb=[100, 300, 200])
    sampler = NvmlSampler(nvml, "gpu0", interval_s=0.001)
    _wait_for(lambda: nvml.calls >= 3)
    nvml.gate.clear()  # NVML now hangs: taking the figures must not wait for it
    usage = Utilisation(torch.device("cpu"), nvml=sampler)
    start = time.perf_counter()
    figures = usage.sample()
    assert time.perf_counter() - start < 0.5
    assert figures["gpu_mem_used_mb"] == 300
    assert 20 <= figures["gpu_sm_util"] <= 90
    assert usage.sample().keys() == {"cpu_util"}  # nothing read since the last sample
    nvml.gate.set()
    usage.close()
    assert nvml.shut and not sampler.thread.is_alive()


def test_open_nvml_finds_the_device_by_pci_bus_id(monkeypatch):
    fake = FakeNvml(utils=[55], mem_mb=[1024])
    module = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByPciBusId=lambda bus: {"00000000:3b:00.0": "gpu0"}[bus],
        nvmlDeviceGetUtilizationRates=fake.nvmlDeviceGetUtilizationRates,
        nvmlDeviceGetMemoryInfo=fake.nvmlDeviceGetMemoryInfo,
        nvmlShutdown=fake.nvmlShutdown,
    )
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.setattr(utilisation, "nvml_bus_id", lambda device: "00000000:3b:00.0")
    assert utilisation.open_nvml(torch.device("cpu")) is None
    sampler = utilisation.open_nvml(torch.device("cuda", 0), interval_s=0.001)
    _wait_for(lambda: fake.calls >= 1)
    assert sampler.take() == {"gpu_sm_util": 55.0, "gpu_mem_used_mb": 1024.0}
    sampler.close()


def test_open_nvml_without_nvidia_ml_py_is_none(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert utilisation.open_nvml(torch.device("cuda", 0)) is None


def test_per_rank_row_names_each_rank():
    row = per_rank_row("util", 2, 7, [{"cpu_util": 0.5}, {"cpu_util": 0.25}])
    assert row == {"kind": "util", "epoch": 2, "step": 7, "cpu_util/rank0": 0.5, "cpu_util/rank1": 0.25}


def test_zero_wall_time_is_no_division_error(monkeypatch):
    usage = Utilisation(torch.device("cpu"))
    monkeypatch.setattr(time, "perf_counter", lambda: usage.wall)
    assert usage.sample()["cpu_util"] >= 0.0


def test_the_gpu_smoke_step_prints_nvmls_figures(monkeypatch):
    from tools.gpu import smoke

    monkeypatch.setattr(
        utilisation, "open_nvml", lambda device, interval_s: NvmlSampler(FakeNvml([50], [2048]), "gpu0")
    )
    assert smoke.nvml_line() == "nvml: SM utilisation 50%, memory used 2048 MB"
    monkeypatch.setattr(utilisation, "open_nvml", lambda device, interval_s: None)
    assert "not installed" in smoke.nvml_line()
