"""The CPU kernels a training step runs are compiled by ``compile_kernels``, before a run loads its
graph (a fresh process: in this one earlier tests may have compiled them already)."""

import subprocess
import sys

import pytest

KERNELS = {
    "forward_kernel": "dsgraph.ops.cpu.forward_kernel",
    "row_deltas_kernel": "dsgraph.ops.cpu.backward_kernels",
    "backward_columns_kernel": "dsgraph.ops.cpu.backward_kernels",
    "backward_rows_kernel": "dsgraph.ops.cpu.backward_kernels",
    "mean_rows_kernel": "dsgraph.ops.cpu.mean_kernels",
    "mean_columns_kernel": "dsgraph.ops.cpu.mean_kernels",
}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_compile_kernels_compiles_what_a_step_runs(dtype):
    kernels = KERNELS
    script = "\n".join(
        [
            "import importlib, torch",
            "from dsgraph.ops.cpu.warm_up import compile_kernels",
            f"compile_kernels(torch.{dtype})",
            f"kernels = {kernels!r}",
            "for name, module in kernels.items():",
            "    print(name, len(getattr(importlib.import_module(module), name).signatures))",
        ]
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    counts = dict(line.split() for line in out.splitlines())
    assert set(counts) == set(kernels)
    assert all(int(n) >= 1 for n in counts.values()), counts
