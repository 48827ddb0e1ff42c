"""The CUDA kernels (cuda/*.cu) run on the CPU under tests/cuda_emulator, through the real host path
of dsgraph/ops/cuda.py (plans, bins, chunk merges, launch configuration, argument order), against
the pure-torch reference. No GPU needed: the CI check that the kernels compute the right thing.

Two graphs. ``BINNED`` uses the kernels' real bins (small <= 16 edges, warp <= 1024, long beyond in
chunks of 4096): rows AND columns of degree 0, 1, 15-17, 31-33, 1023-1025, 4095-4097, 8193 (the
last chunk of 4097 and 8193 holds one edge, so 7 of its block's 8 warps have none) and sources with
no out-edges. ``TINY`` (~170 edges) shrinks the bins (small <= 2, warp <= 8, chunks of 5) so every
schedule of every pass runs for every head dim and dtype in a fraction of a second.

Outputs of the kernels are allocated with torch.empty filled with NaN (torch's
fill_uninitialized_memory), so an output element no kernel writes fails the comparison.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np
import pytest
import torch

import tests.cuda_emulator as emulator
from dsgraph.ops import Partial, attention_backward, attention_forward, cuda, register_backend
from dsgraph.ops.cuda_plan import build_plan
from dsgraph.ops.cuda_source import DTYPES, HEAD_DIMS, KERNELS, compile_options, kernel_source
from dsgraph.ops.dispatch import unregister_backend
from dsgraph.ops.reference import reference_backward, reference_forward
from tests.ops import cases
from tests.ops.cases import TOLERANCE, assert_relative_close, check_against_reference, grads_of, public

pytestmark = pytest.mark.slow  # every test here starts processes

NAME = "cuda-emulated"
DTYPE = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
TINY_BINS = {"small_max": 2, "warp_max": 8, "chunk_edges": 5}


class EmulatedCudaBackend(cuda.CudaBackend):
    """The CUDA backend on CPU tensors, its kernels run by the emulator (never picked by 'auto')."""

    name = NAME
    priority = -100
    device_type = "cpu"

    def available(self) -> bool:
        return True

    def forward(self, *args, **kwargs):
        with _nan_filled_empty():
            return super().forward(*args, **kwargs)

    def backward(self, *args, **kwargs):
        with _nan_filled_empty():
            return super().backward(*args, **kwargs)


@contextlib.contextmanager
def _nan_filled_empty():
    """torch.empty and friends return NaN (floats) or the largest integer while inside."""
    was = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was[0])
        torch.utils.deterministic.fill_uninitialized_memory = was[1]


@pytest.fixture(scope="module", autouse=True)
def emulated_cuda():
    reason = emulator.unavailable()
    if reason:
        pytest.skip(f"CUDA emulator: {reason}")
    emulator.prebuild(
        [
            (kernel_source(f), compile_options(d, h, bias))
            for f in KERNELS
            for d in DTYPES
            for h in HEAD_DIMS
            for bias in (False, True)
        ]
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cuda, "cupy", emulator.fake_cupy)
        mp.setattr(cuda, "_MODULES", {})
        register_backend(EmulatedCudaBackend())
        try:
            yield
        finally:
            unregister_backend(NAME)
            emulator.shutdown()


@pytest.fixture
def tiny_bins(monkeypatch):
    monkeypatch.setattr(cuda, "build_plan", functools.partial(build_plan, **TINY_BINS))


def binned_graph(col_degrees, row_degrees, n_bulk: int, silent: int = 4, seed: int = 0):
    """Sources 0..len(col_degrees)-1 have exactly those out-degrees (source c feeds rows 0..d_c-1 of a
    first block of rows); then ``silent`` sources with none; then n_bulk sources feeding rows of
    exactly ``row_degrees`` in-edges. Rows are shuffled. Returns rowptr, col (int32), n_src."""
    gen = torch.Generator().manual_seed(seed)
    rows = [[c for c, d in enumerate(col_degrees) if r < d] for r in range(max(col_degrees))]
    bulk0 = len(col_degrees) + silent
    rows += [(bulk0 + torch.randint(0, n_bulk, (d,), generator=gen)).tolist() for d in row_degrees]
    rows = [rows[i] for i in torch.randperm(len(rows), generator=gen).tolist()]
    rowptr = torch.zeros(len(rows) + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(torch.tensor([len(r) for r in rows]), 0)
    return rowptr, torch.tensor([c for r in rows for c in r], dtype=torch.int32), bulk0 + n_bulk


EDGE_DEGREES = (0, 1, 15, 16, 17, 31, 32, 33, 1023, 1024, 1025, 4095, 4096, 4097, 8193)


def binned():
    return binned_graph(col_degrees=EDGE_DEGREES[1:], row_degrees=(0, 0, *EDGE_DEGREES), n_bulk=512)


def tiny():
    return binned_graph(
        col_degrees=(1, 2, 3, 8, 9, 10, 11, 16), row_degrees=(0, 0, 1, 2, 3, 4, 8, 9, 10, 11, 15, 16, 17), n_bulk=6
    )


def inputs(graph, heads, dim, dtype, seed=0):
    rowptr, col, n_src = graph
    q, k, v = cases.qkv(rowptr.numel() - 1, n_src, heads, dim, dtype, seed=seed)
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
    return rowptr, col, q, k, v, dy


def check_bins_and_zeros(rowptr, col, n_src, got):
    y, _, dk, dv = got
    silent = torch.bincount(col.long(), minlength=n_src) == 0
    assert bool(silent.any()) and bool((dk[silent] == 0).all()) and bool((dv[silent] == 0).all())
    assert bool((y[rowptr[1:] == rowptr[:-1]] == 0).all())


@DTYPE
def test_every_bin_matches_reference_and_backward_is_bit_identical(dtype):
    rowptr, col, n_src = graph = binned()
    degree, out_degree = rowptr[1:] - rowptr[:-1], torch.bincount(col.long(), minlength=n_src)
    for d in EDGE_DEGREES:  # the graph is what it claims
        assert bool((degree == d).any()) and (d == 0 or bool((out_degree == d).any())), d
    rowptr, col, q, k, v, dy = inputs(graph, 2, 16, dtype)
    first = check_against_reference(NAME, rowptr, col, q, k, v, dy)
    check_bins_and_zeros(rowptr, col, n_src, first)
    second = grads_of(public(NAME), rowptr, col, q, k, v, dy)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@DTYPE
@pytest.mark.parametrize("dim", HEAD_DIMS)
def test_every_head_dim_and_schedule(tiny_bins, dim, dtype):
    rowptr, col, n_src = graph = tiny()
    plan = build_plan(rowptr, **TINY_BINS)
    assert plan.small.numel() and plan.warp.numel() and plan.long.numel()  # every schedule runs
    rowptr, col, q, k, v, dy = inputs(graph, 3, dim, dtype)
    check_bins_and_zeros(rowptr, col, n_src, check_against_reference(NAME, rowptr, col, q, k, v, dy))


@DTYPE
def test_int64_col_gives_the_same_bits(tiny_bins, dtype):
    rowptr, col, q, k, v, dy = inputs(tiny(), 2, 8, dtype)
    as_int32 = grads_of(public(NAME), rowptr, col, q, k, v, dy)
    as_int64 = check_against_reference(NAME, rowptr, col.long(), q, k, v, dy)
    for a, b in zip(as_int32, as_int64):
        assert torch.equal(a, b)


@DTYPE
def test_partial_requires_grad(tiny_bins, dtype):
    rowptr, col, q, k, v, dy = inputs(tiny(), 2, 16, dtype)
    for need in ((True, False, False), (False, True, True), (False, False, True), (True, True, False)):
        q, k, v = (t.detach().requires_grad_(r) for t, r in zip((q, k, v), need))
        check_against_reference(NAME, rowptr, col, q, k, v, dy)


@DTYPE
def test_strided_and_misaligned_inputs(tiny_bins, dtype):
    rowptr, col, n_src = tiny()
    n_dst, heads, dim = rowptr.numel() - 1, 2, 32
    gen = torch.Generator().manual_seed(9)
    q_base = torch.randn(n_dst, 3, heads, dim, generator=gen).to(dtype)
    kv_base = torch.randn(heads, n_src, 2, dim, generator=gen).to(dtype)
    dy_base = torch.randn(n_dst, dim, heads, generator=gen).to(dtype)
    strided = (
        q_base[:, 1],
        kv_base[:, :, 0].transpose(0, 1),
        kv_base[:, :, 1].transpose(0, 1),
        dy_base.transpose(1, 2),
    )
    for q, k, v, dy in (strided, tuple(cases.misaligned(t) for t in strided)):
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        check_against_reference(NAME, rowptr, col, q, k, v, dy)


@DTYPE
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_edge_values_around_the_unchanged_kernels(tiny_bins, dtype, with_bias):
    """Edge values (model.edge_features 'bias_value') on the CUDA backend: its kernels keep only lse,
    so the probabilities are recomputed in torch around them (``edge_values.RecomputedEdgeValues``)."""
    rowptr, col, n_src = tiny()
    cases.check_edge_values(NAME, rowptr, col, n_src, 3, 16, dtype, "cpu", with_bias=with_bias)


@DTYPE
def test_backward_takes_any_layout_of_y_and_lse(tiny_bins, dtype):
    """The separate backward pass (ag_ring's merged blocks) with y and lse that are views."""
    rowptr, col, q, k, v, dy = (t.detach() if t.is_floating_point() else t for t in inputs(tiny(), 2, 16, dtype))
    part = attention_forward(rowptr, col, q, k, v, backend=NAME)
    y, lse = part.y, part.lse
    y_t = y.transpose(0, 1).contiguous().transpose(0, 1)  # the same values, other strides
    lse_t = lse.t().contiguous().t()
    assert not y_t.is_contiguous() and not lse_t.is_contiguous()
    got = attention_backward(rowptr, col, q, k, v, Partial(y_t, lse_t, (lse_t,)), dy, backend=NAME)
    want = attention_backward(rowptr, col, q, k, v, part, dy, backend=NAME)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    y_ref, lse_ref = reference_forward(rowptr, col, q, k, v, q.shape[-1] ** -0.5)
    for a, b in zip(got, reference_backward(rowptr, col, q, k, v, y_ref, lse_ref, dy, q.shape[-1] ** -0.5)):
        assert_relative_close(a, b, TOLERANCE[dtype])


@DTYPE
def test_empty_graphs(dtype):
    cases.check_empty_graphs(NAME, dtype, "cpu")


@DTYPE
def test_score_bias_on_every_bin_matches_reference_bit_identically(dtype):
    """The bias read by the forward and both backward passes (the column pass through the CSC's CSR
    positions) and its gradient written by the dQ pass, in every schedule."""
    rowptr, col, q, k, v, dy = inputs(binned(), 2, 16, dtype)
    bias = cases.score_bias(col.numel(), 2, dtype)
    first = check_against_reference(NAME, rowptr, col, q, k, v, dy, bias=bias)
    second = grads_of(public(NAME), rowptr, col, q, k, v, dy, bias)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@DTYPE
@pytest.mark.parametrize("dim", HEAD_DIMS)
def test_score_bias_every_head_dim_and_schedule(tiny_bins, dim, dtype):
    rowptr, col, q, k, v, dy = inputs(tiny(), 3, dim, dtype)
    bias = cases.score_bias(col.numel(), 3, dtype)
    check_against_reference(NAME, rowptr, col, q, k, v, dy, bias=bias)
    for need in ((False, False, False, True), (True, False, False, True), (False, True, True, False)):
        q, k, v, bias = (t.detach().requires_grad_(r) for t, r in zip((q, k, v, bias), need))
        check_against_reference(NAME, rowptr, col, q, k, v, dy, bias=bias)


@DTYPE
def test_score_bias_on_a_power_law_graph_with_a_hub(dtype):
    """The acceptance graph: R-MAT rows of degree 0 and 1, and a row of 20,000 in-edges."""
    rowptr, col = cases.rmat_with_hub()
    q, k, v = cases.qkv(rowptr.numel() - 1, cases.N_SRC, 2, 16, dtype)
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    check_against_reference(NAME, rowptr, col, q, k, v, dy, bias=cases.score_bias(col.numel(), 2, dtype))


@DTYPE
def test_score_bias_in_the_blockwise_passes(tiny_bins, dtype):
    rowptr, col, q, k, v, dy = (t.detach() if t.is_floating_point() else t for t in inputs(tiny(), 2, 16, dtype))
    bias = cases.score_bias(col.numel(), 2, dtype).detach()
    part = attention_forward(rowptr, col, q, k, v, bias=bias, backend=NAME)
    got = attention_backward(rowptr, col, q, k, v, part, dy, bias=bias, backend=NAME)
    scale = q.shape[-1] ** -0.5
    y_ref, lse_ref = reference_forward(rowptr, col, q, k, v, scale, bias)
    assert_relative_close(part.lse, lse_ref, TOLERANCE[dtype])
    for a, b in zip(got, reference_backward(rowptr, col, q, k, v, y_ref, lse_ref, dy, scale, bias)):
        assert_relative_close(a, b, TOLERANCE[dtype])


BF16_ROUND_TRIP = r"""
#include "sparse_attention_common.cuh"
// The kernels' own bf16 conversions: store_frag rounds fp32 to bf16 bits, load_frag widens them.
extern "C" __global__ void bf16_round_trip(const float* x, unsigned short* bits, float* back, int n_frags) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n_frags) return;
  dsg::Frag f;
  for (int j = 0; j < DSG_VEC; ++j) f.x[j] = x[i * DSG_VEC + j];
  dsg::store_frag(bits + i * DSG_VEC, f);
  const dsg::Frag g = dsg::load_frag(bits + i * DSG_VEC);
  for (int j = 0; j < DSG_VEC; ++j) back[i * DSG_VEC + j] = g.x[j];
}
"""


def test_bf16_bits_round_to_nearest_even_like_torch():
    """Bit-exact: the tolerance-based tests cannot see a rounding mode (half-up vs half-even)."""
    from dsgraph.ops.cuda_source import CUDA_DIR

    gen = torch.Generator().manual_seed(0)
    hi = torch.randint(0, 2**16, (4096,), generator=gen, dtype=torch.int32) << 16
    ties = hi | 0x8000  # exactly half-way between two bf16 values: even wins
    near = hi | torch.randint(0, 2**16, (4096,), generator=gen, dtype=torch.int32)
    special = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-40, -1e-40, 3.4e38]).view(
        torch.int32
    )
    x = torch.cat([ties, near, hi, special, torch.zeros(8 - special.numel() % 8, dtype=torch.int32)]).view(
        torch.float32
    )
    module = emulator.fake_cupy.RawModule(
        code=BF16_ROUND_TRIP, options=(f"-I{CUDA_DIR}", "-DDSG_HEAD_DIM=8", "-DDSG_BF16=1", "-DDSG_BIAS=0")
    )
    bits, back = torch.empty(x.numel(), dtype=torch.int16), torch.empty_like(x)
    n = x.numel() // 8
    module.get_function("bf16_round_trip")(
        (-(-n // 256),),
        (256,),
        (
            emulator.fake_cupy.from_dlpack(x),
            emulator.fake_cupy.from_dlpack(bits),
            emulator.fake_cupy.from_dlpack(back),
            np.int32(n),
        ),
    )
    want, nan = x.to(torch.bfloat16), x.isnan()  # torch's NaN bits vary by CPU path; the kernel's is 0x7fc0
    assert torch.equal(bits[~nan], want.view(torch.int16)[~nan]) and bool((bits[nan] == 0x7FC0).all())
    assert torch.equal(back.view(torch.int32)[~nan], want.float().view(torch.int32)[~nan]) and bool(
        back[nan].isnan().all()
    )
