"""The CUDA backend without a GPU: every kernel compiles through NVRTC for sm_80 and sm_90, fp32 and
bf16, every supported head dim, with and without the score bias; the degree-binned work plans cover
every edge exactly once; and importing the backend on a CPU-only machine works and reports it
unavailable."""

from __future__ import annotations

import pytest
import torch

from dsgraph.graph import load_dataset
from dsgraph.ops import available_backends, sparse_attention
from dsgraph.ops.cuda_plan import build_plan
from dsgraph.ops.cuda_source import DTYPES, HEAD_DIMS, KERNELS, compile_options
from tools.common.nvrtc import NvrtcUnavailable, compile_cubin, compile_cubin_with_cupy, nvrtc_version

ARCHS = ("sm_80", "sm_90")

try:
    NVRTC_VERSION, NVRTC_MISSING = nvrtc_version(), ""
except NvrtcUnavailable as exc:
    NVRTC_VERSION, NVRTC_MISSING = None, str(exc)
needs_nvrtc = pytest.mark.skipif(NVRTC_VERSION is None, reason=f"NVRTC not found: {NVRTC_MISSING}")
try:
    import cupy.cuda.compiler  # noqa: F401  (the cuda extra; it imports without a GPU)

    CUPY_MISSING = ""
except Exception as exc:  # not installed, or no CUDA libraries at all
    CUPY_MISSING = f"{type(exc).__name__}: {exc}"


@needs_nvrtc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", [pytest.param("sm_80", marks=pytest.mark.slow), "sm_90"])  # sm_80: --all
@pytest.mark.parametrize("file", sorted(KERNELS))
@pytest.mark.parametrize("bias", [False, True], ids=["plain", "bias"])
def test_kernels_compile_to_cubin(file, arch, dtype, bias):
    for head_dim in HEAD_DIMS:
        cubin = compile_cubin(file, arch, dtype, head_dim, bias)
        assert cubin[:4] == b"\x7fELF", (file, arch, dtype, head_dim)
        for name in KERNELS[file]:  # every launched kernel is in the cubin's symbol table
            assert name.encode() + b"\x00" in cubin, (name, file, arch, dtype, head_dim)


@needs_nvrtc
def test_compiling_leaves_the_interpreter_intact():
    """NVRTC writes its log and cubin into the buffers it is given. A shared immutable bytes object
    there (CPython keeps one object per one-byte value, and an empty log is one byte) once changed
    b" " into b"\\x00" for the whole process: every later pickle read the integer 32 as 0."""
    import io
    import pickle

    compile_cubin(sorted(KERNELS)[0], "sm_80", "float32", HEAD_DIMS[0])  # a clean compile: an empty log
    assert b" " == bytes([32]) and b" ".decode() == " "
    assert pickle.load(io.BytesIO(pickle.dumps(torch.Size([32, 12])))) == torch.Size([32, 12])


@pytest.mark.skipif(bool(CUPY_MISSING), reason=f"CuPy not importable ({CUPY_MISSING}); pip install -e '.[cuda]'")
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("file", sorted(KERNELS))
def test_kernels_compile_through_cupy(file, arch):
    """CuPy's own NVRTC route (its options, -ftz=true included), the architecture forced."""
    for dtype, bias in ((d, b) for d in DTYPES for b in (False, True)):
        for head_dim in HEAD_DIMS:
            cubin = compile_cubin_with_cupy(file, arch, dtype, head_dim, bias)
            assert cubin[:4] == b"\x7fELF", (file, arch, dtype, head_dim)
            for name in KERNELS[file]:
                assert name.encode() + b"\x00" in cubin, (name, file, arch, dtype, head_dim)


def test_unsupported_head_dim_and_dtype_are_value_errors():
    with pytest.raises(ValueError, match="head dim 24"):
        compile_options("float32", 24)
    with pytest.raises(ValueError, match="float16"):
        compile_options("float16", 16)


@pytest.mark.parametrize("small_max, warp_max, chunk_edges", [(16, 1024, 4096), (2, 8, 5)])
def test_plan_covers_every_edge_once(small_max, warp_max, chunk_edges):
    g = load_dataset("rmat:10")
    rowptr = torch.cat([g.rowptr, g.rowptr[-1:] + 12_345])  # plus one long row
    degree = rowptr[1:] - rowptr[:-1]
    plan = build_plan(rowptr, small_max=small_max, warp_max=warp_max, chunk_edges=chunk_edges)

    segments = torch.cat([plan.small, plan.warp, plan.long]).long()
    assert torch.equal(segments.sort().values, torch.arange(degree.numel()))  # each segment in one bin
    assert bool((degree[plan.small.long()] <= small_max).all()) and bool((degree[plan.long.long()] > warp_max).all())

    covered = torch.zeros(int(rowptr[-1]), dtype=torch.int64)
    for seg in plan.small.tolist() + plan.warp.tolist():
        covered[rowptr[seg] : rowptr[seg + 1]] += 1
    for r, seg in enumerate(plan.long.tolist()):
        chunks = range(int(plan.long_chunk_ptr[r]), int(plan.long_chunk_ptr[r + 1]))
        for c in chunks:
            assert int(plan.chunk_seg[c]) == seg
            begin = int(plan.chunk_begin[c])
            covered[begin : min(begin + chunk_edges, int(rowptr[seg + 1]))] += 1
    assert bool((covered == 1).all())


def test_cuda_backend_is_off_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert "cuda" not in available_backends()
    q = torch.randn(1, 1, 8)
    with pytest.raises(ValueError, match="backend 'cuda' is not available on this machine"):
        sparse_attention(torch.tensor([0, 0]), torch.zeros(0, dtype=torch.int32), q, q, q, backend="cuda")


@needs_nvrtc
def test_ptxas_resource_figures():
    """tools/gpu/cuda_resources.py's figures: every kernel has them; only the chunk kernels use shared
    memory and a barrier (the block's warp states)."""
    from tools.common.nvrtc import ptxas_resources

    for file in sorted(KERNELS):
        figures = ptxas_resources(file, "sm_90", "float32", 32)
        assert set(figures) == set(KERNELS[file])
        for name, f in figures.items():
            assert 0 < f["registers"] <= 255, (name, f)
            assert (f["smem"] > 0) == (f["barriers"] == 1) == name.endswith("_chunk"), (name, f)


def test_torch_stream_reaches_cupy_with_and_without_the_stream_protocol(monkeypatch):
    """CuPy 14 with a torch stream that has ``__cuda_stream__`` (torch 2.13): Stream.from_external;
    a torch stream without it (torch 2.11, the GPU image's): ExternalStream(handle, device), as on
    older CuPy, where from_external would raise TypeError; the emulator's None: no handle."""
    from types import SimpleNamespace

    from dsgraph.ops import cuda

    with_protocol = SimpleNamespace(cuda_stream=1234, __cuda_stream__=lambda: (0, 1234))
    without_protocol = SimpleNamespace(cuda_stream=5678)
    external = lambda ptr, device: ("ExternalStream", ptr, device)  # noqa: E731

    class Stream14:
        @staticmethod
        def from_external(obj):
            if not hasattr(obj, "__cuda_stream__"):
                raise TypeError("the object does not support the CUDA stream protocol")  # what CuPy 14.2 does
            return ("from_external", obj)

    monkeypatch.setattr(cuda, "cupy", SimpleNamespace(cuda=SimpleNamespace(Stream=Stream14, ExternalStream=external)))
    assert cuda._external_stream(with_protocol, 0) == ("from_external", with_protocol)
    assert cuda._external_stream(without_protocol, 1) == ("ExternalStream", 5678, 1)
    assert cuda._external_stream(None, None) == ("ExternalStream", None, None)
    monkeypatch.setattr(cuda, "cupy", SimpleNamespace(cuda=SimpleNamespace(Stream=object, ExternalStream=external)))
    assert cuda._external_stream(with_protocol, 1) == ("ExternalStream", 1234, 1)
    assert cuda._external_stream(without_protocol, 2) == ("ExternalStream", 5678, 2)
