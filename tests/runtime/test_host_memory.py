"""host_memory: glibc's mmap threshold fixed (unless the user set one), every tensor kept in the
heap (``keep_heap``, what AGP's measuring ranks do), and DeepSpeed's Muon module imported without
importing TorchInductor (its torch.compile decorations deferred to first use)."""

import os
import subprocess
import sys

import pytest


def _fresh(code: str, *args: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.slow
def test_mmap_threshold_is_fixed_unless_the_user_set_one():
    """In fresh processes: fixing the threshold changes the allocator for the rest of the process."""
    code = "from dsgraph.runtime import host_memory; print(host_memory.fix_mmap_threshold())"
    assert _fresh(code) == "True"  # glibc (Linux CI)
    user_set = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"},
    )
    assert user_set.stdout.strip() == "False"


KEPT = """
import sys, torch
from dsgraph.runtime import host_memory
from tools.reports.agp_sweep_ranks import PeakProbe
kept = host_memory.keep_heap() if sys.argv[1] != "default" else None
if sys.argv[1] == "map":  # keep_heap undone, as the validation's memory samples do
    kept = host_memory.map_large()
rss = lambda: PeakProbe.status_bytes("VmRSS") >> 20
before = rss()
x = torch.ones(2**24)  # 64 MiB, above glibc's largest dynamic threshold (32 MiB)
del x
after_free = rss()
probe = PeakProbe()
base = probe.start()  # hands the freed heap back
x = torch.ones(2**24)
print(kept, after_free - before, (probe.peak() - base) >> 20)
"""


@pytest.mark.slow
def test_keep_heap_keeps_a_freed_large_tensor_resident_and_the_probe_still_sees_it():
    """glibc maps a 64 MiB tensor of its own and unmaps it on free; with ``keep_heap`` it comes from
    the heap and stays there for the next one, ``map_large`` undoes that, and ``PeakProbe`` (which
    trims first) measures the rise of a call either way."""
    kept, held_mb, rise_mb = _fresh(KEPT, "keep").split()
    assert kept == "True" and int(held_mb) >= 60 and int(rise_mb) >= 60
    kept, held_mb, rise_mb = _fresh(KEPT, "default").split()
    assert kept == "None" and int(held_mb) < 8 and int(rise_mb) >= 60
    mapped, held_mb, rise_mb = _fresh(KEPT, "map").split()
    assert mapped == "True" and int(held_mb) < 8 and int(rise_mb) >= 60
    user_set = subprocess.run(
        [sys.executable, "-c", "from dsgraph.runtime import host_memory; print(host_memory.keep_heap())"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "MALLOC_MMAP_MAX_": "65536"},
    )
    assert user_set.stdout.strip() == "False"


@pytest.mark.slow
def test_muon_module_imports_without_inductor():
    out = _fresh(
        "import sys; from dsgraph.runtime import host_memory; done = host_memory.defer_muon_compile(); "
        "from deepspeed.runtime.zero.muon import original_muon as m; from deepspeed.runtime import compiler; "
        "import torch; print(done, 'torch._inductor' in sys.modules, compiler.compile() is torch.compile, "
        "m.zeropower_via_newtonschulz5.__name__, host_memory.defer_muon_compile())"
    )
    assert out.splitlines()[-1] == "True False True zeropower_via_newtonschulz5 False"


def test_config_takes_a_threshold_in_mib():
    import pytest

    from dsgraph.train.config import DsgraphConfig

    assert DsgraphConfig().host_mmap_threshold_mb == 0  # glibc's own threshold unless asked
    assert DsgraphConfig.from_dict({"host_mmap_threshold_mb": 1}).host_mmap_threshold_mb == 1
    assert DsgraphConfig.from_dict({"host_mmap_threshold_mb": -1}).host_mmap_threshold_mb == -1  # heap only
    with pytest.raises(ValueError, match="'host_mmap_threshold_mb' must be a size in MiB, 0 .* or -1 .* got -2"):
        DsgraphConfig.from_dict({"host_mmap_threshold_mb": -2})
