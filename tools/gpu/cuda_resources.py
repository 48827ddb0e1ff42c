#!/usr/bin/env python
"""Prints what ptxas reports for every CUDA kernel (the `-Xptxas -v` figures), without a GPU.

NVRTC compiles cuda/*.cu with -Xptxas=-v, as dsgraph/ops/cuda.py would at run time, and the table
lists per kernel: registers per thread, static shared memory, stack frame, spill stores and loads
(bytes; anything but 0 means local-memory traffic), and barriers. Needs the dev extra (cuda-bindings
and nvidia-cuda-nvrtc), like tools/gpu/nvrtc_compile.py.

Examples:
  python -m tools.gpu.cuda_resources
  python -m tools.gpu.cuda_resources --arch sm_90 --dtype bfloat16 --head-dim 128
"""

from __future__ import annotations

import argparse
import sys

from dsgraph.ops.cuda_source import KERNELS
from tools.common.nvrtc import add_variant_options, nvrtc_version, ptxas_resources, variants


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_variant_options(p, ["sm_90"])
    args = p.parse_args(argv)
    major, minor = nvrtc_version()
    print(f"NVRTC {major}.{minor}, ptxas -v")
    print("| kernel | arch | dtype | D | registers | smem B | stack B | spill stores B | spill loads B | barriers |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    spills = 0
    for file, arch, dtype, dim in variants(args):
        try:
            figures = ptxas_resources(file, arch, dtype, dim)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
        for name in KERNELS[file]:
            f = figures[name]
            spills += f["spill_stores"] + f["spill_loads"]
            print(
                f"| {name} | {arch} | {dtype} | {dim} | {f['registers']} | {f['smem']} | {f['stack']} | "
                f"{f['spill_stores']} | {f['spill_loads']} | {f['barriers']} |"
            )
    print(f"\nspill bytes in all: {spills}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
