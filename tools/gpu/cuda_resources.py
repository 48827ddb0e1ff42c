#!/usr/bin/env python
"""Prints what ptxas reports for every CUDA kernel (the `-Xptxas -v` figures), without a GPU.

NVRTC compiles cuda/*.cu with -Xptxas=-v, as dsgraph/ops/cuda.py would at run time, and the table
lists per kernel: registers per thread, static shared memory, stack frame, spill stores and loads
(bytes; anything but 0 means local-memory traffic), and barriers. Needs the dev extra (cuda-bindings
and nvidia-cuda-nvrtc), like tools/nvrtc_compile.py.

Examples:
  python -m tools.gpu.cuda_resources
  python -m tools.gpu.cuda_resources --arch sm_90 --dtype bfloat16 --head-dim 128
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


from dsgraph.ops.cuda_source import DTYPES, HEAD_DIMS, KERNELS  # noqa: E402
from tools.common.nvrtc import nvrtc_version, ptxas_resources  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", action="append", help="target, e.g. sm_90 (repeatable; default sm_90)")
    p.add_argument("--dtype", action="append", choices=DTYPES, help="repeatable; default all")
    p.add_argument("--head-dim", action="append", type=int, choices=HEAD_DIMS, help="repeatable; default all")
    p.add_argument("--file", action="append", choices=sorted(KERNELS), help="repeatable; default all")
    args = p.parse_args(argv)
    major, minor = nvrtc_version()
    print(f"NVRTC {major}.{minor}, ptxas -v")
    print("| kernel | arch | dtype | D | registers | smem B | stack B | spill stores B | spill loads B | barriers |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    spills = 0
    for file in args.file or sorted(KERNELS):
        for arch in args.arch or ["sm_90"]:
            for dtype in args.dtype or DTYPES:
                for dim in args.head_dim or HEAD_DIMS:
                    try:
                        figures = ptxas_resources(file, arch, dtype, dim)
                    except RuntimeError as exc:
                        print(exc, file=sys.stderr)
                        return 1
                    for name in KERNELS[file]:
                        f = figures[name]
                        spills += f["spill_stores"] + f["spill_loads"]
                        print(f"| {name} | {arch} | {dtype} | {dim} | {f['registers']} | {f['smem']} | {f['stack']} | "
                              f"{f['spill_stores']} | {f['spill_loads']} | {f['barriers']} |")  # fmt: skip
    print(f"\nspill bytes in all: {spills}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
