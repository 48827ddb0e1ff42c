"""Backends as registered objects: every available backend against the reference (generated from
the registry), the shared autograd Function's hand-off to kernels, and ``auto``'s choice."""

from __future__ import annotations

import logging

import pytest
import torch

from dsgraph.ops import (
    attention_backward,
    attention_forward,
    available_backends,
    get_backend,
    merge,
    register_backend,
    sparse_attention,
)
from dsgraph.ops.backend import Backend, FusedBackend
from dsgraph.ops.cuda import CudaBackend
from dsgraph.ops.dispatch import backend_for_inputs, unregister_backend
from dsgraph.ops.reference import sparse_attention_reference
from tests.ops.cases import (
    N_SRC,
    TOLERANCE,
    assert_relative_close,
    qkv,
    rmat_with_hub,
    run,
    run_reference_fp32,
    source_blocks,
)

FUSED = [name for name in available_backends() if name != "reference"]


@pytest.fixture(scope="module")
def hub_graph():
    return rmat_with_hub()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", FUSED)
def test_every_registered_backend_matches_the_reference(hub_graph, name, dtype):
    backend = get_backend(name)
    device = torch.device(backend.device_type or "cpu")
    rowptr, col = (t.to(device) for t in hub_graph)
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, 4, 16, dtype, device=device)
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(device, dtype)

    def fn(rowptr, col, q, k, v, scale):
        return sparse_attention(rowptr, col, q, k, v, scale=scale, backend=name)

    got = run(fn, rowptr, col, q, k, v, dy)
    want = run_reference_fp32(sparse_attention_reference, rowptr, col, q, k, v, dy)
    for what, a, b in zip(("y", "dq", "dk", "dv"), got, want):
        assert a.dtype == dtype and a.shape == b.shape, what
        assert_relative_close(a, b.to(dtype), TOLERANCE[dtype])


class DLPackKernels(FusedBackend):
    """Kernels that read every tensor through DLPack, as CuPy does; like the fp32 CUDA backend, its
    forward returns the accumulation-dtype output itself as y (so the saved y is the output)."""

    name, priority, device_type = "dlpack-probe", -1, None

    def forward(self, rowptr, col, q, k, v, scale):
        y = sparse_attention_reference(rowptr, col, q, k, v, scale)
        lse = torch.zeros(q.shape[:2])
        return y, lse, (lse,)

    def backward(self, rowptr, col, q, k, v, y_acc, saved, dy, scale, needs):
        for t in (q, k, v, y_acc, *saved, dy):
            t.__dlpack__()  # the protocol CuPy's from_dlpack uses: BufferError for a tensor that requires grad
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)


def test_fused_backward_hands_kernels_tensors_dlpack_can_export():
    backend = DLPackKernels()
    register_backend(backend)
    try:
        rowptr = torch.tensor([0, 2, 3], dtype=torch.int64)
        col = torch.tensor([0, 1, 1], dtype=torch.int32)
        q, k, v = qkv(2, 2, 1, 8)
        y = sparse_attention(rowptr, col, q, k, v, backend=backend.name)
        assert y.requires_grad
        y.sum().backward()  # fails with "Can't export tensors that require gradient" if the Function hands them over
        assert q.grad is not None and k.grad is not None
    finally:
        unregister_backend(backend.name)


def test_cuda_dlpack_views_detach_first(monkeypatch):
    """The CUDA backend's DLPack wrapper itself, with CuPy replaced by a DLPack consumer on the CPU."""
    from dsgraph.ops import cuda

    class FakeCupy:
        @staticmethod
        def from_dlpack(t):
            return t.__dlpack__()  # what cupy.from_dlpack calls

    monkeypatch.setattr(cuda, "cupy", FakeCupy)
    cuda._dl(torch.randn(3, requires_grad=True))
    cuda._dl(torch.randn(3, dtype=torch.bfloat16, requires_grad=True))


def test_only_some_inputs_requiring_grad(hub_graph):
    rowptr, col = hub_graph
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, 2, 8)
    k.requires_grad_(False)
    v.requires_grad_(False)
    sparse_attention(rowptr, col, q, k, v, backend="cpu").sum().backward()
    assert q.grad is not None and k.grad is None and v.grad is None


def test_cuda_backend_states_what_it_cannot_run():
    cuda = CudaBackend()
    q64 = torch.zeros(2, 2, 16, dtype=torch.float64)
    assert "dtype torch.float64 is not supported" in cuda.unsupported(q64, {"q": q64})
    q24 = torch.zeros(2, 2, 24)
    assert "head dim 24 is not supported" in cuda.unsupported(q24, {"q": q24})
    assert "'q' is on cpu" in cuda.unsupported(q24[:, :, :16], {"q": q24[:, :, :16]})


class PickyDevice(Backend):
    """A fast backend for meta tensors that, like the CUDA one, runs fp32 and bf16 only."""

    name, priority, device_type = "picky", 50, "meta"

    def unsupported(self, q, tensors):
        return "" if q.dtype in (torch.float32, torch.bfloat16) else f"dtype {q.dtype} is not supported"

    def attention(self, rowptr, col, q, k, v, scale):
        return torch.zeros_like(q)


def test_auto_falls_back_to_reference_with_a_logged_reason(caplog):
    register_backend(PickyDevice())
    try:
        q32, q64 = torch.zeros(3, 2, 8, device="meta"), torch.zeros(3, 2, 8, device="meta", dtype=torch.float64)
        assert backend_for_inputs("auto", q32).name == "picky"
        with caplog.at_level(logging.WARNING, logger="dsgraph.ops.dispatch"):
            assert backend_for_inputs("auto", q64).name == "reference"
            backend_for_inputs("auto", q64)
        messages = [
            r.getMessage() for r in caplog.records if "picky: dtype torch.float64 is not supported" in r.getMessage()
        ]
        assert len(messages) == 1, caplog.text  # logged once, not per call
        with pytest.raises(ValueError, match="picky backend: dtype torch.float64 is not supported"):
            backend_for_inputs("picky", q64)
    finally:
        unregister_backend("picky")


@pytest.mark.parametrize("name", [n for n in available_backends() if isinstance(get_backend(n), FusedBackend)])
def test_separate_passes_split_over_source_blocks_equal_the_whole(hub_graph, name):
    """attention_forward/backward on two blocks of sources, merged by their log-sum-exp (forward) and
    given the whole attention's y and lse (backward), give the whole attention's y and gradients."""
    rowptr, col = hub_graph
    device = torch.device(get_backend(name).device_type or "cpu")
    rowptr, col = rowptr.to(device), col.to(device)
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, 2, 16, device=device)
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(4)).to(device)
    y_ref = sparse_attention_reference(rowptr, col, q, k, v, 0.25)
    grads_ref = torch.autograd.grad(y_ref, (q, k, v), dy)
    half = N_SRC // 2
    parts = [
        block[:4] for block in source_blocks(rowptr, col, ((0, half), (half, N_SRC)))
    ]  # a CSR per block of sources
    blocks = [attention_forward(r, c, q, k[lo:hi], v[lo:hi], scale=0.25, backend=name) for r, c, lo, hi in parts]
    y, lse = merge(blocks[0], blocks[1])
    assert_relative_close(y, y_ref.detach(), 1e-5)
    assert_relative_close(lse, torch.logaddexp(blocks[0].lse, blocks[1].lse), 1e-6)
    dq = torch.zeros_like(q)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for (r, c, lo, hi), block in zip(parts, blocks):
        dq_b, dk_b, dv_b = attention_backward(
            r, c, q, k[lo:hi], v[lo:hi], block, dy, whole=(y, lse), scale=0.25, backend=name
        )
        dq, dk[lo:hi], dv[lo:hi] = dq + dq_b, dk_b, dv_b
    for got, want in zip((dq, dk, dv), grads_ref):
        assert_relative_close(got, want, 1e-5)
