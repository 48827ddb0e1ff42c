"""The warm-up that tools/gpu/check.sh starts at t = 0, beside its first steps, on the machine's
spare cores:

    python -m tools.gpu.warmup --kernels              # every CUDA module variant into CuPy's cache
    python -m tools.gpu.warmup --kernels --emulate    # the rehearsal: the emulator's builds instead
    python -m tools.gpu.warmup --graph rmat:22        # one graph into dsgraph's dataset cache

``--kernels`` compiles every (file, dtype, head dim, score bias) variant of cuda/*.cu, the text and
options dsgraph/ops/cuda.py hands CuPy, with ``cupy.RawModule(...).compile()`` in --workers spawned
processes: CuPy keeps each cubin in its kernel cache (``CUPY_CACHE_DIR``), so a later step's
``RawModule`` of the same variant loads the cubin instead of running NVRTC.

``--graph SPEC`` writes the graph into the dataset cache (``DSGRAPH_CACHE``) under the name that
``load_dataset(SPEC)`` reads (``dsgraph.graph.datasets.dataset_file``; the file appears whole, by
rename), so every later step reads it by the same name and none generates it again.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context


def variants() -> list[tuple[str, tuple[str, ...]]]:
    """(kernel text, NVRTC options) of every module dsgraph/ops/cuda.py may compile."""
    from dsgraph.ops.cuda_source import (
        DTYPES,
        HEAD_DIMS,
        KERNELS,
        compile_options,
        kernel_source,
    )

    return [
        (kernel_source(f), tuple(compile_options(d, h, b)))
        for f, d, h, b in itertools.product(sorted(KERNELS), DTYPES, HEAD_DIMS, (False, True))
    ]


def _compile(job: tuple[str, tuple[str, ...]]) -> None:
    import cupy

    code, options = job
    cupy.RawModule(code=code, options=options, backend="nvrtc").compile()


def compile_kernels(workers: int, emulate: bool) -> int:
    jobs = variants()
    if emulate:
        import tests.cuda_emulator as emulator

        emulator.prebuild(jobs, workers)
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            list(pool.map(_compile, jobs))
    return len(jobs)


def write_graph(spec: str) -> str:
    from dsgraph.graph.datasets import cached_dataset

    return cached_dataset(spec)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernels", action="store_true", help="compile every CUDA module variant into CuPy's cache")
    p.add_argument("--emulate", action="store_true", help="with --kernels: the CUDA emulator's builds (the rehearsal)")
    p.add_argument(
        "--graph", action="append", default=[], metavar="SPEC", help="write SPEC into the dataset cache (repeatable)"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="compile processes (default: half the cores)",
    )
    args = p.parse_args(argv)
    if not args.kernels and not args.graph:
        p.error("nothing to do: give --kernels and/or --graph SPEC")
    began = time.perf_counter()
    if args.kernels:
        n = compile_kernels(args.workers, args.emulate)
        where = "the emulator's builds" if args.emulate else "CuPy's cache"
        print(f"warmup: {n} kernel modules into {where} in {time.perf_counter() - began:.1f} s", flush=True)
    for spec in args.graph:
        path = write_graph(spec)
        print(f"warmup: {spec} -> {path} at {time.perf_counter() - began:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
