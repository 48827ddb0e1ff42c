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
import itertools
import sys
import time

from tools.common.nvrtc import add_variant_options, compile_cubin, nvrtc_version, variants


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_variant_options(p, ["sm_80", "sm_90"])
    args = p.parse_args(argv)
    major, minor = nvrtc_version()
    print(f"NVRTC {major}.{minor}")
    print("| file | arch | dtype | D | bias | cubin KB | seconds |\n|---|---|---|---|---|---|---|")
    for (file, arch, dtype, dim), bias in itertools.product(variants(args), (False, True)):
        t0 = time.perf_counter()
        try:
            cubin = compile_cubin(file, arch, dtype, dim, bias)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
        seconds = time.perf_counter() - t0
        print(
            f"| {file} | {arch} | {dtype} | {dim} | {'yes' if bias else 'no'} | {len(cubin) / 1024:.0f} "
            f"| {seconds:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
