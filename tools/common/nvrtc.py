"""Compiles the CUDA kernels to cubin with NVRTC, without a GPU (the CI compile check).

CuPy cannot compile on a machine without a GPU (it asks the device for its architecture), but NVRTC
itself needs none. This uses NVRTC through ``cuda.bindings.nvrtc`` (the ``cuda-bindings`` package)
and the NVRTC library from the ``nvidia-cuda-nvrtc`` wheel (both in the ``dev`` extra).
"""

from __future__ import annotations

from dsgraph.ops.cuda_source import compile_options, kernel_source


class NvrtcUnavailable(RuntimeError):
    """NVRTC (cuda-bindings and an NVRTC library) cannot be loaded on this machine."""


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library; raises NvrtcUnavailable when it cannot be loaded."""
    nvrtc = _nvrtc()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # the bindings load the library lazily, on the first call
        raise NvrtcUnavailable(f"the NVRTC library cannot be loaded: {exc}") from exc
    _check(nvrtc, err, "nvrtcVersion")
    return major, minor


def compile_cubin(file: str, arch: str, dtype: str, head_dim: int) -> bytes:
    """Compiles cuda/<file> for ``arch`` (e.g. 'sm_90') and returns the cubin.

    Raises RuntimeError with NVRTC's log when the source does not compile or draws a warning."""
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(kernel_source(file).encode(), file.encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        options = [f"-arch={arch}".encode(), *(o.encode() for o in compile_options(dtype, head_dim))]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        log = _log(nvrtc, prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or "warning" in log:
            raise RuntimeError(f"NVRTC on {file} ({arch}, {dtype}, D={head_dim}): {err}\n{log}")
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(nvrtc, err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(nvrtc, err, "nvrtcGetCUBIN")
        return cubin
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
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    return log.decode(errors="replace").rstrip("\x00 \n")


def _check(nvrtc, err, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")
