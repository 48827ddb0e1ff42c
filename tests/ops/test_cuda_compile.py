"""The CUDA backend without a GPU: every kernel compiles through NVRTC for sm_80 and sm_90, fp32 and
bf16, every supported head dim; the degree-binned work plans cover every edge exactly once; and
importing the backend on a CPU-only machine works and reports it unavailable."""

from __future__ import annotations

import pytest
import torch

from dsgraph.graph import load_dataset
from dsgraph.ops import available_backends, sparse_attention
from dsgraph.ops.cuda_plan import build_plan
from dsgraph.ops.cuda_source import DTYPES, HEAD_DIMS, KERNELS, compile_options
from tools.common.nvrtc import NvrtcUnavailable, compile_cubin, nvrtc_version

ARCHS = ("sm_80", "sm_90")

try:
    NVRTC_VERSION, NVRTC_MISSING = nvrtc_version(), ""
except NvrtcUnavailable as exc:
    NVRTC_VERSION, NVRTC_MISSING = None, str(exc)
needs_nvrtc = pytest.mark.skipif(NVRTC_VERSION is None, reason=f"NVRTC not found: {NVRTC_MISSING}")


@needs_nvrtc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("file", sorted(KERNELS))
def test_kernels_compile_to_cubin(file, arch, dtype):
    for head_dim in HEAD_DIMS:
        cubin = compile_cubin(file, arch, dtype, head_dim)
        assert cubin[:4] == b"\x7fELF", (file, arch, dtype, head_dim)
        for name in KERNELS[file]:  # every launched kernel is in the cubin's symbol table
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
