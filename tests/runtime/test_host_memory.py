"""host_memory: glibc's mmap threshold fixed (unless the user set one), and DeepSpeed's Muon module
imported without importing TorchInductor (its torch.compile decorations deferred to first use)."""

import os
import subprocess
import sys

import pytest


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


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
    with pytest.raises(ValueError, match="host_mmap_threshold_mb"):
        DsgraphConfig.from_dict({"host_mmap_threshold_mb": -1})
