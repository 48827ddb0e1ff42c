"""Compiles the CUDA kernels to cubin with NVRTC, without a GPU (the CI compile check).

CuPy cannot compile on a machine without a GPU (it asks the device for its architecture), but NVRTC
itself needs none. This uses NVRTC through ``cuda.bindings.nvrtc`` (the ``cuda-bindings`` package)
and the NVRTC library from the ``nvidia-cuda-nvrtc`` wheel (both in the ``dev`` extra).
"""

from __future__ import annotations

import argparse
import itertools
import re
from collections.abc import Iterator

from dsgraph.ops.cuda_source import DTYPES, HEAD_DIMS, KERNELS, compile_options, kernel_source


class NvrtcUnavailable(RuntimeError):
    """NVRTC (cuda-bindings and an NVRTC library) cannot be loaded on this machine."""


def add_variant_options(p: argparse.ArgumentParser, default_archs: list[str]) -> None:
    """--arch, --dtype, --head-dim and --file (each repeatable) of the tools that compile kernel variants."""
    p.add_argument(
        "--arch", action="append", help=f"target, e.g. sm_90 (repeatable; default {' and '.join(default_archs)})"
    )
    p.add_argument("--dtype", action="append", choices=DTYPES, help="repeatable; default all")
    p.add_argument("--head-dim", action="append", type=int, choices=HEAD_DIMS, help="repeatable; default all")
    p.add_argument("--file", action="append", choices=sorted(KERNELS), help="repeatable; default all")
    p.set_defaults(default_archs=default_archs)


def variants(args: argparse.Namespace) -> Iterator[tuple[str, str, str, int]]:
    """(file, arch, dtype, head dim) of every variant the options of ``add_variant_options`` select."""
    return itertools.product(
        args.file or sorted(KERNELS), args.arch or args.default_archs, args.dtype or DTYPES, args.head_dim or HEAD_DIMS
    )


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library; raises NvrtcUnavailable when it cannot be loaded."""
    nvrtc = _nvrtc()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # the bindings load the library lazily, on the first call
        raise NvrtcUnavailable(f"the NVRTC library cannot be loaded: {exc}") from exc
    _check(nvrtc, err, "nvrtcVersion")
    return major, minor


def compile_cubin(file: str, arch: str, dtype: str, head_dim: int, bias: bool = False) -> bytes:
    """Compiles cuda/<file> for ``arch`` (e.g. 'sm_90') and returns the cubin (``bias``: the kernels
    that take a score bias).

    Raises RuntimeError with NVRTC's log when the source does not compile or draws a warning."""
    return _compile(file, arch, dtype, head_dim, bias=bias)[0]


def ptxas_resources(file: str, arch: str, dtype: str, head_dim: int) -> dict[str, dict[str, int]]:
    """Per kernel of cuda/<file>, what ptxas reports with -v (NVRTC's -Xptxas=-v): registers,
    shared memory (smem bytes), stack frame, spill stores and loads (bytes), barriers."""
    log = _compile(file, arch, dtype, head_dim, ("-Xptxas=-v",))[1]
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        if m := re.search(r"Function properties for (\w+)", line):
            current = out.setdefault(
                m.group(1), {"registers": 0, "smem": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0, "barriers": 0}
            )
        elif current is not None and (
            m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        ):
            current["stack"], current["spill_stores"], current["spill_loads"] = map(int, m.groups())
        elif current is not None and (m := re.search(r"Used (\d+) registers", line)):
            current["registers"] = int(m.group(1))
            current["barriers"] = int(b.group(1)) if (b := re.search(r"used (\d+) barriers", line)) else 0
            current["smem"] = int(b.group(1)) if (b := re.search(r"(\d+) bytes smem", line)) else 0
    return out


def _compile(
    file: str, arch: str, dtype: str, head_dim: int, extra: tuple[str, ...] = (), bias: bool = False
) -> tuple[bytes, str]:
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(kernel_source(file).encode(), file.encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        options = [f"-arch={arch}".encode(), *(o.encode() for o in (*compile_options(dtype, head_dim, bias), *extra))]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        log = _log(nvrtc, prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or "warning" in log:
            raise RuntimeError(f"NVRTC on {file} ({arch}, {dtype}, D={head_dim}, bias={bias}): {err}\n{log}")
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(nvrtc, err, "nvrtcGetCUBINSize")
        cubin = bytearray(size)  # NVRTC writes into the buffer: never an immutable (possibly shared) bytes object
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(nvrtc, err, "nvrtcGetCUBIN")
        return bytes(cubin), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise NvrtcUnavailable("cuda-bindings is not installed (pip install -e '.[dev]')") from exc
    return nvrtc


def _log(nvrtc, prog) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    # A writable buffer: an empty log has size 1, and b" " * 1 is CPython's shared one-byte object for
    # b" ", whose overwritten byte then turned every b" " of the process into b"\x00" (pickle read 32 as 0).
    log = bytearray(size)
    nvrtc.nvrtcGetProgramLog(prog, log)
    return log.decode(errors="replace").rstrip("\x00 \n")


def _check(nvrtc, err, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")


def compile_cubin_with_cupy(file: str, arch: str, dtype: str, head_dim: int, bias: bool = False) -> bytes:
    """Compiles cuda/<file> the way ``cupy.RawModule(backend='nvrtc')`` does at run time (CuPy's own
    options: ``-ftz=true``, ``--device-as-default-execution-space``, ``--pch`` on NVRTC 12.8+, and
    ``-arch=sm_XX`` for a cubin), with the architecture forced so that no GPU is needed.

    CuPy asks the device for the architecture in one memoised private helper,
    ``cupy.cuda.compiler._get_arch_for_options_for_nvrtc``; it is replaced for the call. Private
    CuPy API (checked with CuPy 14.2): ImportError without CuPy, AttributeError if CuPy changes it."""
    from cupy.cuda import compiler

    cc = arch.removeprefix("sm_")
    chosen = compiler._get_arch_for_options_for_nvrtc  # noqa: SLF001
    compiler._get_arch_for_options_for_nvrtc = lambda arch=None: (f"-arch=sm_{cc}", "cubin")
    try:
        options = (*compile_options(dtype, head_dim, bias), "-ftz=true")  # RawModule adds -ftz=true
        cubin, _ = compiler.compile_using_nvrtc(
            kernel_source(file), options, arch=cc, filename=file, cache_in_memory=True
        )
    finally:
        compiler._get_arch_for_options_for_nvrtc = chosen
    return cubin
