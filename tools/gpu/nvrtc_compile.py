#!/usr/bin/env python
"""Compiles every CUDA kernel in cuda/ to cubin with NVRTC, without a GPU, and prints a table.

The same compilation as tests/ops/test_cuda_compile.py (the CI check), for a person: which file,
architecture, dtype, head dim and score bias (the kernels with and without one), the cubin size
and the compile time. Exits 1 on the first error, with NVRTC's log. Needs the dev extra
(cuda-bindings and nvidia-cuda-nvrtc).

Examples:
  python -m tools.gpu.nvrtc_compile
  python -m tools.gpu.nvrtc_compile --arch sm_90 --dtype bfloat16 --head-dim 64
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


from dsgraph.ops.cuda_source import DTYPES, HEAD_DIMS, KERNELS  # noqa: E402
from tools.common.nvrtc import compile_cubin, nvrtc_version  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", action="append", help="target, e.g. sm_90 (repeatable; default sm_80 and sm_90)")
    p.add_argument("--dtype", action="append", choices=DTYPES, help="repeatable; default all")
    p.add_argument("--head-dim", action="append", type=int, choices=HEAD_DIMS, help="repeatable; default all")
    p.add_argument("--file", action="append", choices=sorted(KERNELS), help="repeatable; default all")
    args = p.parse_args(argv)
    major, minor = nvrtc_version()
    print(f"NVRTC {major}.{minor}")
    print("| file | arch | dtype | D | bias | cubin KB | seconds |\n|---|---|---|---|---|---|---|")
    for file in args.file or sorted(KERNELS):
        for arch in args.arch or ["sm_80", "sm_90"]:
            for dtype, bias in ((d, b) for d in args.dtype or DTYPES for b in (False, True)):
                for dim in args.head_dim or HEAD_DIMS:
                    t0 = time.perf_counter()
                    try:
                        cubin = compile_cubin(file, arch, dtype, dim, bias)
                    except RuntimeError as exc:
                        print(exc, file=sys.stderr)
                        return 1
                    print(f"| {file} | {arch} | {dtype} | {dim} | {'yes' if bias else 'no'} | {len(cubin) / 1024:.0f} | "
                          f"{time.perf_counter() - t0:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
