"""A CPU emulator for the CUDA kernels in cuda/*.cu: test infrastructure, not a backend.

``fake_cupy`` stands in for the ``cupy`` module that ``dsgraph/ops/cuda.py`` uses (RawModule,
get_function, launches with (grid, block, args), from_dlpack, cuda.Device, cuda.Stream.from_external
and cuda.ExternalStream). ``RawModule(code=..., options=...)`` compiles the very text NVRTC would
compile with g++, under AddressSanitizer and UBSan, together with cuda_emu.h (the CUDA built-ins)
and runtime.cpp (a fiber per CUDA thread, barrier and warp-mask checks, the launch loop): one
executable per (source text, options), cached on disk. Each module runs as one child process;
a launch copies the arguments' bytes into a shared file, the child runs the grid and copies the
written buffers back. Arguments are checked against the kernel's C++ signature first. Any error
in the kernel (out of bounds, misaligned, deadlock, bad mask) raises ``EmulatorError`` with the
child's report; the child is then restarted on the next launch. See README.md.
"""

from __future__ import annotations

import atexit
import hashlib
import mmap
import os
import re
import select
import shutil
import subprocess
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
CXX = os.environ.get("CXX", "g++")
CXXFLAGS = (
    "-std=c++17",
    "-O1",
    "-g",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    "-ffp-contract=off",
    "-Wall",
    "-Wno-unknown-pragmas",
    "-Wno-unused-function",
)
LAUNCH_TIMEOUT_S = float(os.environ.get("DSGRAPH_CUDA_EMULATOR_TIMEOUT", 600))
_KERNEL_RE = re.compile(
    r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*)?(\w+)\s*\('
)
# torch dtype -> the element type codes of runtime.cpp's signatures it may be passed as
_ELEMENT = {
    torch.int64: ("i64",),
    torch.int32: ("i32",),
    torch.float32: ("f32",),
    torch.int16: ("i16", "u16"),
    torch.uint8: ("u8", "i8"),
    torch.int8: ("i8", "u8"),
    torch.float64: ("f64",),
}
_SCALAR = {np.int32: "i32", np.uint32: "u32", np.int64: "i64", np.uint64: "u64", np.float32: "f32", np.float64: "f64"}
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)


class EmulatorError(RuntimeError):
    """A kernel misbehaved under the emulator, or a launch was malformed."""


def unavailable() -> str:
    """'' when g++ with AddressSanitizer can build the emulator here, else why not."""
    if shutil.which(CXX) is None:
        return f"no C++ compiler '{CXX}' on PATH"
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the emulator's fibers need x86-64 (this is {platform.machine()})"
    return ""


def cache_dir() -> Path:
    root = os.environ.get("DSGRAPH_CUDA_EMULATOR_CACHE") or Path.home() / ".cache" / "dsgraph" / "cuda-emulator"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def kernel_names(code: str) -> list[str]:
    """The extern "C" __global__ functions of a kernel source."""
    return _KERNEL_RE.findall(code)


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:20]


_BUILD_LOCK = threading.Lock()
_RUNTIME_DIGEST = _digest(*((HERE / f).read_bytes() for f in ("cuda_emu.h", "emu_launch.h", "runtime.cpp")), *CXXFLAGS)


def _compile(args: list[str], what: str) -> None:
    done = subprocess.run([CXX, *args], capture_output=True, text=True, errors="replace")
    if done.returncode != 0:
        raise EmulatorError(f"g++ failed on {what}:\n{done.stderr[-8000:]}")


def _runtime_object() -> Path:
    out = cache_dir() / f"runtime-{_RUNTIME_DIGEST}.o"
    with _BUILD_LOCK:
        if not out.exists():
            tmp = out.with_suffix(f".{os.getpid()}.tmp.o")
            _compile([*CXXFLAGS, "-c", str(HERE / "runtime.cpp"), "-o", str(tmp)], "runtime.cpp")
            os.replace(tmp, out)
    return out


def build(code: str, options: tuple[str, ...] = ()) -> Path:
    """The emulator executable for a kernel source and its NVRTC options (-D... only), built once."""
    defines = [o for o in options if o.startswith(("-D", "-U", "-I"))]
    if len(defines) != len(options):
        raise EmulatorError(f"emulator: only -D/-U/-I options are understood, got {options}")
    names = kernel_names(code)
    if not names:
        raise EmulatorError('emulator: the source defines no extern "C" __global__ function')
    key = _digest(_RUNTIME_DIGEST, code, *defines)
    exe = cache_dir() / f"kernels-{key}"
    if exe.exists():
        return exe
    runtime = _runtime_object()
    work = Path(tempfile.mkdtemp(prefix="emu-build-", dir=cache_dir()))
    try:
        (work / "kernel.cu").write_text(code)
        (work / "main.cpp").write_text(
            f'#include "{work / "kernel.cu"}"\n#include "emu_launch.h"\n'
            f"static const emu::KernelEntry emu_kernels[] = {{{' '.join(f'EMU_KERNEL({n})' for n in names)}}};\n"
            "int main() { return emu::serve(emu_kernels, sizeof emu_kernels / sizeof *emu_kernels); }\n"
        )
        tmp = work / "kernels"
        _compile(
            [
                *CXXFLAGS,
                f"-I{HERE}",
                f"-I{HERE / 'include'}",
                "-include",
                str(HERE / "cuda_emu.h"),
                *defines,
                str(work / "main.cpp"),
                str(runtime),
                "-o",
                str(tmp),
            ],
            f"{names[0]}..",
        )
        os.replace(tmp, exe)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return exe


class _Server:
    """One child process running an emulator executable; launches go one at a time."""

    def __init__(self, exe: Path):
        self.exe, self.proc, self.kernels = exe, None, {}
        self.lock = threading.Lock()
        fd, self.shm_path = tempfile.mkstemp(
            prefix="dsgraph-emu-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
        )
        os.close(fd)

    def start(self) -> None:
        _LIVE.pop(self.exe, None)
        _LIVE[self.exe] = self
        while len(_LIVE) > MAX_LIVE_PROCESSES:  # each is 30-50 MB; a stopped one restarts on its next launch
            _LIVE.pop(next(iter(_LIVE))).stop()
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [str(self.exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, bufsize=0
        )
        self.kernels, self.pending = {}, b""
        count = int(self._line().split()[1])
        for _ in range(count):
            _, name, *params = self._line().split()
            self.kernels[name] = [tuple(p.split(":")) for p in params]
        if self._line() != "ready":
            self._died("did not start")

    def _line(self, timeout: float = 60.0) -> str:
        """The child's next stdout line (its own buffer: select() does not see Python's)."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                self.proc.kill()
                self.proc.wait()
                self.proc = None
                raise EmulatorError(
                    f"emulator: no answer from the kernel process within {timeout:.0f} s (a kernel that never ends?)"
                )
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._died("exited")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode(errors="replace")

    def _died(self, what: str):
        status = self.proc.wait()
        self.stderr.seek(0)
        report = self.stderr.read().decode(errors="replace")
        self.proc = None
        summary = re.search(r"^SUMMARY: (.*)$|^(.*runtime error: .*)$", report, re.MULTILINE)
        head = f": {next(g for g in summary.groups() if g)}" if summary else ""
        raise EmulatorError(f"emulator: the kernel process {what} (exit status {status}){head}\n{report[-12000:]}")

    def signature(self, name: str):
        with self.lock:
            if self.proc is None:
                self.start()
            if name not in self.kernels:
                raise EmulatorError(
                    f"emulator: the module has no kernel named '{name}' (it has {sorted(self.kernels)})"
                )
            return self.kernels[name]

    def launch(self, name: str, grid, block, args) -> None:
        with self.lock:
            if self.proc is None:
                self.start()
            _LIVE.move_to_end(self.exe)
            params = self.kernels[name]
            buffers, lines = _marshal(name, params, args)
            total = sum(-(-b.nbytes // 64) * 64 for b in buffers) or 64
            with open(self.shm_path, "r+b") as f:
                f.truncate(total)
                with mmap.mmap(f.fileno(), total) as shm:
                    offset = 0
                    for b in buffers:
                        b.offset = offset
                        shm[offset : offset + b.nbytes] = b.bytes_view().numpy().tobytes() if b.nbytes else b""
                        offset += -(-b.nbytes // 64) * 64
                    dims = f"{' '.join(map(str, grid))} {' '.join(map(str, block))}"
                    command = f"launch {name} {dims} {self.shm_path} {total} {len(args)}\n"
                    body = "".join(line if isinstance(line, str) else line() for line in lines)
                    self.proc.stdin.write((command + body).encode())
                    self.proc.stdin.flush()
                    answer = self._line(LAUNCH_TIMEOUT_S)
                    if answer.startswith("error "):
                        self.proc.wait()
                        self.proc = None
                        raise EmulatorError(answer[len("error ") :].replace(";", "\n  "))
                    if answer != "done":
                        self._died(f"answered '{answer}'")
                    for b in buffers:
                        if b.written and b.nbytes:
                            view = np.frombuffer(shm, dtype=np.uint8, count=b.nbytes, offset=b.offset)
                            b.bytes_view().copy_(torch.from_numpy(view.copy()))
                            del view

    def stop(self) -> None:
        """Ends the child process (a later launch starts a new one)."""
        if self.proc is not None:
            try:
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        _LIVE.pop(self.exe, None)

    def close(self) -> None:
        self.stop()
        if os.path.exists(self.shm_path):
            os.unlink(self.shm_path)


class _Buffer:
    def __init__(self, array: FakeArray, written: bool):
        self.tensor, self.written = array.tensor, written
        self.nbytes = array.tensor.numel() * array.tensor.element_size()
        self.offset = 0

    def bytes_view(self) -> torch.Tensor:
        return self.tensor.reshape(-1).view(torch.uint8)


def _marshal(name: str, params, args):
    """Checks args against the kernel's parameters; returns the buffers and the command's argument lines."""
    if not isinstance(args, tuple):
        raise EmulatorError(f"{name}: kernel arguments must be a tuple, got {type(args).__name__}")
    if len(args) != len(params):
        raise EmulatorError(f"{name}: {len(args)} arguments for {len(params)} parameters")
    buffers, lines = [], []
    for i, (arg, param) in enumerate(zip(args, params)):
        kind, ctype = param[0], param[1]
        if kind == "p":
            if not isinstance(arg, FakeArray):
                raise EmulatorError(
                    f"{name}: argument {i} must be an array (a pointer parameter of {ctype}), got {type(arg).__name__}"
                )
            if ctype not in _ELEMENT.get(arg.tensor.dtype, ()):
                raise EmulatorError(f"{name}: argument {i} is {arg.tensor.dtype}, the parameter points to {ctype}")
            buffer = _Buffer(arg, written=param[2] == "w")
            buffers.append(buffer)
            lines.append(lambda b=buffer, a=arg: f"b {b.offset} {b.nbytes} {a.tensor.data_ptr() % 16}\n")
        else:
            if isinstance(arg, FakeArray) or type(arg) not in _SCALAR:
                raise EmulatorError(
                    f"{name}: argument {i} must be a numpy scalar of {ctype}, got {type(arg).__name__} (CuPy would "
                    "guess its type)"
                )
            if _SCALAR[type(arg)] != ctype:
                raise EmulatorError(f"{name}: argument {i} is {_SCALAR[type(arg)]}, the parameter is {ctype}")
            bits = np.array([arg]).view(np.uint32 if np.dtype(type(arg)).itemsize == 4 else np.uint64)[0]
            lines.append(f"s {int(bits):x}\n")
    _check_aliasing(name, buffers)
    return buffers, lines


def _check_aliasing(name: str, buffers) -> None:
    spans = [(b.tensor.data_ptr(), b.tensor.data_ptr() + b.nbytes, b) for b in buffers if b.nbytes]
    for i, (lo, hi, b) in enumerate(spans):
        for lo2, hi2, b2 in spans[i + 1 :]:
            if lo < hi2 and lo2 < hi and (b.written or b2.written):
                raise EmulatorError(
                    f"{name}: a written buffer overlaps another argument (the kernels' pointers are __restrict__)"
                )


class FakeArray:
    """What ``fake_cupy.from_dlpack`` returns: a contiguous CPU tensor, shared, not copied."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


class _Function:
    def __init__(self, server: _Server, name: str):
        self.server, self.name = server, name

    def __call__(self, grid, block, args, *, shared_mem: int = 0, stream=None):
        grid, block = _dims(grid, MAX_GRID, "grid", self.name), _dims(block, MAX_BLOCK, "block", self.name)
        if block[0] * block[1] * block[2] > 1024:
            raise EmulatorError(f"{self.name}: a block of {block[0] * block[1] * block[2]} threads (at most 1024)")
        if shared_mem:
            raise EmulatorError(f"{self.name}: dynamic shared memory is not emulated")
        self.server.launch(self.name, grid, block, args)


def _dims(value, limits, what, name):
    dims = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) for d in dims):
        raise EmulatorError(f"{name}: {what} must be 1 to 3 integers, got {value!r}")
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    for d, limit in zip(dims, limits):
        if not 1 <= d <= limit:
            raise EmulatorError(f"{name}: {what} {dims} is outside 1..{limits} (an invalid configuration on a GPU)")
    return dims


_SERVERS: dict[Path, _Server] = {}
_LIVE: OrderedDict[Path, _Server] = OrderedDict()  # servers with a running child, least recently used first
MAX_LIVE_PROCESSES = 4


class RawModule:
    """cupy.RawModule(code=..., options=..., backend='nvrtc'), run by the emulator."""

    def __init__(self, code: str, options: tuple[str, ...] = (), backend: str = "nvrtc", **_):
        self.code, self.options, self.server = code, tuple(options), None

    def compile(self, *_, **__):
        exe = build(self.code, self.options)
        self.server = _SERVERS.get(exe) or _SERVERS.setdefault(exe, _Server(exe))

    def get_function(self, name: str) -> _Function:
        if self.server is None:
            self.compile()
        self.server.signature(name)
        return _Function(self.server, name)


def from_dlpack(t) -> FakeArray:
    if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
        raise EmulatorError(f"emulator: from_dlpack takes CPU torch tensors, got {getattr(t, 'device', type(t))}")
    if t.requires_grad:
        raise EmulatorError("emulator: DLPack refuses tensors that require grad (detach first)")
    if not t.is_contiguous():
        raise EmulatorError(
            f"emulator: a kernel argument is not contiguous (shape {tuple(t.shape)}, strides {t.stride()}): "
            "a DLPack view keeps the strides, and the kernels index it as contiguous"
        )
    return FakeArray(t)


class _Context:
    def __init__(self, *args, **kwargs):
        self.args = args

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Stream(_Context):
    @classmethod
    def from_external(cls, obj):
        return cls(obj)


class _Runtime:
    @staticmethod
    def getDeviceCount() -> int:
        return 1


class _Cuda:
    Device = _Context
    Stream = _Stream
    ExternalStream = _Context
    runtime = _Runtime


class _FakeCupy:
    """The parts of the cupy module that dsgraph/ops/cuda.py uses."""

    RawModule = RawModule
    from_dlpack = staticmethod(from_dlpack)
    cuda = _Cuda


fake_cupy = _FakeCupy()


def prebuild(jobs: list[tuple[str, tuple[str, ...]]], workers: int | None = None) -> None:
    """Builds several (code, options) executables at once (the compile dominates a cold test run)."""
    from concurrent.futures import ThreadPoolExecutor

    _runtime_object()
    with ThreadPoolExecutor(workers or os.cpu_count() or 2) as pool:
        list(pool.map(lambda job: build(*job), jobs))


def shutdown() -> None:
    """Ends every kernel process (their shared files included)."""
    for server in _SERVERS.values():
        server.close()
    _SERVERS.clear()


atexit.register(shutdown)
