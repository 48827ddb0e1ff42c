"""Host memory of a rank process beyond its tensors: freed tensors go back to the system.

Every rank is a process of its own, so what a process holds besides its share of the graph and of
the activations is paid once per rank, and at P ranks it is what keeps the per-rank peak from
falling as 1/P. Memory the allocator keeps after tensors are freed is one such part, and avoidable.

torch allocates CPU tensors with malloc. glibc serves a request of at least the mmap threshold with
a mapping of its own, unmapped on free; smaller ones come from the heap, which keeps freed memory
resident (counted in RSS) for reuse. The threshold is dynamic by default: each free of a mapped
block raises it to that block's size, up to 32 MiB, so once the first large tensor is freed every
tensor below 32 MiB comes from the heap. A training step allocates and frees many such tensors of
shifting sizes (a rank's row blocks, head groups, per-layer temporaries), and the heap keeps the
high-water mark of them all, with the fragments between, for the rest of the run.
``fix_mmap_threshold`` sets the threshold once (``mallopt(M_MMAP_THRESHOLD)``, which also ends the
dynamic raising); the training entry point calls it with the config's ``host_mmap_threshold_mb`` (0,
the default: not at all). A threshold the user set (``MALLOC_MMAP_THRESHOLD_``, ``GLIBC_TUNABLES``)
is left as it is. The price: every tensor of the threshold or more is a fresh mapping whose pages
fault in when first written, and is unmapped when freed. Measured (rmat:18, GP-AG, 2 layers,
regather_kv, 8 head groups, 4 CPU ranks on 2 shared cores; peak RSS per rank max, seconds per step):
glibc's dynamic threshold 1,797 MB, about 6 s; fixed at 8 MiB 1,057 MB, about 8.5 s; at 1 MiB
987 MB, about 10.7 s. One rank, 1 MiB: 2,482 MB against 2,507 MB, 3.5 s against 2.8 s.

The other way, ``keep_heap`` (``host_mmap_threshold_mb: -1``) serves every tensor from the heap
(``mallopt(M_MMAP_MAX, 0)``) and keeps freed memory there (``M_TRIM_THRESHOLD`` at its largest,
2 GiB): glibc's dynamic threshold stops at 32 MiB, so without it every tensor of 32 MiB or more (a
layer's activations from about 2^17 rows at d = 64 in fp32) is mapped anew in every step and the
kernel zeroes its pages on first touch. Measured on 2 cores (one GP-AG layer, forward and backward,
rmat:16, d = 128, one rank): 970 ms a call, 150 ms of it in the kernel, with glibc's rule; 850 ms
and no page faults once the kept heap has reached its high-water mark, which took 3-4 calls (the
first ones cost more than glibc's rule: the heap grows through fresh pages). The price: the
resident set keeps the step's high-water mark of the heap, fragments included. AGP's
profile and validation ranks run this way (``dsgraph/agp/spawn.py``), so that a measured layer's time
is its compute and not the kernel's page zeroing; the validation's memory samples switch back to
glibc's mapping for their call (``map_large``), the rule a run with the default setting follows.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4  # glibc's malloc.h
TRIM_KEEP_BYTES = 2**31 - 1  # mallopt takes an int
GLIBC_MMAP_MAX = 65536  # glibc's default count of mapped blocks
DYNAMIC_CEILING_BYTES = 32 << 20  # the highest threshold glibc's dynamic rule reaches (64-bit)
USER_TUNABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_")
THRESHOLD_BYTES = 1 << 20
MUON_MODULE = "deepspeed.runtime.zero.muon.muon_optimizer"


def _libc():
    """The C library: glibc's soname first (no ``ldconfig`` process), else whatever ``find_library`` finds."""
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def _user_set_malloc() -> bool:
    """Whether the user tuned glibc's malloc through its environment (then it is left as it is)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return any(k in os.environ for k in USER_TUNABLES) or "malloc.mmap" in tunables or "malloc.trim" in tunables


def _tunable_glibc():
    """The C library when it is glibc (musl's mallopt does nothing) and the user left malloc's
    settings alone, else None (then nothing is changed)."""
    if _user_set_malloc():
        return None
    try:
        libc = _libc()
        libc.gnu_get_libc_version  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def fix_mmap_threshold(nbytes: int = THRESHOLD_BYTES) -> bool:
    """Fixes glibc's mmap threshold at ``nbytes``; True when set, False where the user set one or
    the C library is not glibc (nothing changes there)."""
    libc = _tunable_glibc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(nbytes)))


def keep_heap() -> bool:
    """Serves every later allocation from glibc's heap and keeps what is freed there (module
    docstring); True when set, False where the user tuned malloc or the C library is not glibc."""
    libc = _tunable_glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_MAX, ctypes.c_int(0))) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, ctypes.c_int(TRIM_KEEP_BYTES))
    )


def map_large(nbytes: int = DYNAMIC_CEILING_BYTES) -> bool:
    """Undoes ``keep_heap``: glibc maps blocks of ``nbytes`` or more of their own again, and trims
    the heap's free top above twice that, which is where its dynamic rule settles in a run that freed
    a large tensor (the default ``nbytes``: the rule's ceiling). True when set, False where the user
    tuned malloc or the C library is not glibc."""
    libc = _tunable_glibc()
    if libc is None:
        return False
    return all(
        libc.mallopt(option, ctypes.c_int(value))
        for option, value in ((M_MMAP_MAX, GLIBC_MMAP_MAX), (M_MMAP_THRESHOLD, nbytes), (M_TRIM_THRESHOLD, 2 * nbytes))
    )


def apply_threshold_mb(mb: int) -> bool:
    """The config's ``host_mmap_threshold_mb``: 0 leaves glibc's dynamic threshold, -1 keeps every
    tensor in the heap (``keep_heap``), N > 0 fixes the threshold at N MiB."""
    if mb == 0:
        return False
    return keep_heap() if mb < 0 else fix_mmap_threshold(mb << 20)


def defer_muon_compile() -> bool:
    """Imports DeepSpeed's Muon optimizer module with its ``torch.compile`` decorations deferred to
    each function's first call; True when done, False where the module is missing or imported
    already (then nothing changes).

    DeepSpeed's ZeRO optimizers import that module in every run (to test ``isinstance(optimizer,
    MuonWithAuxAdam)``, at ``deepspeed.initialize`` and in each gradient reduction), and the module
    decorates three functions with ``torch.compile``, which imports TorchInductor's compile
    machinery (about 40 MB per process, beyond the ``torch._dynamo`` that torch.optim's ``step``
    imports anyway). A run that does not use Muon never calls them; one that does compiles them
    on first use, as torch.compile itself does."""
    try:
        from deepspeed.runtime import compiler
    except ImportError:
        return False
    if MUON_MODULE in sys.modules or not callable(getattr(compiler, "compile", None)):
        return False
    eager = compiler.compile
    compiler.compile = functools.partial(_deferred_compile, eager)
    try:
        importlib.import_module(MUON_MODULE)
    except ImportError:
        return False
    finally:
        compiler.compile = eager
    return True


def _deferred_compile(compile_factory, *args, **kwargs):
    """``compile_factory(*args, **kwargs)`` (a decorator), applied at the decorated function's first call."""

    def decorate(fn):
        compiled = None

        @functools.wraps(fn)
        def call(*a, **k):
            nonlocal compiled
            if compiled is None:
                compiled = compile_factory(*args, **kwargs)(fn)
            return compiled(*a, **k)

        return call

    return decorate


def available_memory_bytes() -> int:
    """The machine's available memory: MemAvailable from /proc/meminfo (Linux); 8 GiB when it cannot be
    read. What AGP's profile, the run's memory limit and the partitioner's budget start from."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30
