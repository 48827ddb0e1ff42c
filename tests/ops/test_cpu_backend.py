"""The fused CPU backend against the pure-torch reference: outputs and all input gradients."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from dsgraph.graph import load_dataset
from dsgraph.ops import sparse_attention
from dsgraph.ops.csc import build_transpose, csc_slots, transpose
from dsgraph.ops.dispatch import resolve_backend
from dsgraph.ops.reference import sparse_attention_reference
from tests.ops import cases
from tests.ops.cases import (
    HUB_COLUMN_ROWS,
    HUB_DEGREE,
    N_SRC,
    TOLERANCE,
    assert_relative_close,
    qkv,
    rmat_with_hub,
    run,
    run_reference_fp32,
)
from tools.common.peak_memory import cpu_peak_supported, peak_extra_bytes


def sparse_attention_cpu(rowptr, col, q, k, v, scale):
    return sparse_attention(rowptr, col, q, k, v, scale=scale, backend="cpu")


@pytest.fixture(scope="module")
def hub_graph():
    rowptr, col = rmat_with_hub()
    in_degrees, out_degrees = rowptr[1:] - rowptr[:-1], torch.bincount(col.long(), minlength=N_SRC)
    assert int((in_degrees == 0).sum()) > 0 and int(in_degrees.max()) >= HUB_DEGREE
    assert int(out_degrees.max()) >= HUB_COLUMN_ROWS
    return rowptr, col


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("dim", [8, 16, 32, 64])
@pytest.mark.parametrize("heads", [1, 4, 8])
def test_matches_reference(hub_graph, heads, dim, dtype):
    rowptr, col = hub_graph
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, heads, dim, dtype)
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    got = run(sparse_attention_cpu, rowptr, col, q, k, v, dy)
    want = run_reference_fp32(sparse_attention_reference, rowptr, col, q, k, v, dy)
    for name, a, b in zip(("y", "dq", "dk", "dv"), got, want):
        assert a.dtype == dtype and a.shape == b.shape, name
        assert_relative_close(a, b.to(dtype), TOLERANCE[dtype])
    empty_rows = (rowptr[1:] == rowptr[:-1]).nonzero().squeeze(1)
    assert bool((got[0][empty_rows] == 0).all())


def test_non_contiguous_inputs(hub_graph):
    rowptr, col = hub_graph
    n_dst, heads, dim = rowptr.numel() - 1, 4, 16
    gen = torch.Generator().manual_seed(3)
    q_base = torch.randn(n_dst, 3, heads, dim, generator=gen, requires_grad=True)
    kv_base = torch.randn(heads, N_SRC, 2, dim, generator=gen, requires_grad=True)
    q, k, v = q_base[:, 1], kv_base[:, :, 0].transpose(0, 1), kv_base[:, :, 1].transpose(0, 1)
    assert not (q.is_contiguous() or k.is_contiguous() or v.is_contiguous())
    dy = torch.randn(n_dst, dim, heads, generator=gen).transpose(1, 2)  # a strided upstream gradient too

    def grads(fn):
        y = fn(rowptr, col, q, k, v, dim**-0.5)
        return (y, *torch.autograd.grad(y, (q_base, kv_base), dy))

    for a, b in zip(grads(sparse_attention_cpu), grads(sparse_attention_reference)):
        assert_relative_close(a, b, 1e-5)


def test_gradcheck_float64():
    rowptr = torch.tensor([0, 3, 3, 5, 9, 10], dtype=torch.int64)  # row 1 has no edges
    col = torch.tensor([0, 2, 3, 1, 1, 0, 1, 2, 3, 3], dtype=torch.int32)
    q, k, v = qkv(5, 4, 2, 8, torch.float64, seed=5)
    assert torch.autograd.gradcheck(lambda q, k, v: sparse_attention_cpu(rowptr, col, q, k, v, 0.7), (q, k, v))


def test_backward_is_bit_identical(hub_graph):
    rowptr, col = hub_graph
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, 4, 16)
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(2))
    first = run(sparse_attention_cpu, rowptr, col, q, k, v, dy)
    second = run(sparse_attention_cpu, rowptr, col, q, k, v, dy)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_column_and_row_chunks_give_the_one_chunk_gradients(hub_graph, monkeypatch, dtype):
    """The backward's column pass over chunks of 37 source rows (the hub column inside one) and its
    row pass over chunks of 29 rows (bf16: fp32 chunks cast into dq) write the same dq, dk, dv as
    one chunk, bit for bit (each column and row is computed alone either way)."""
    import dsgraph.ops.cpu as cpu

    rowptr, col = hub_graph
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, 4, 16, dtype)
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(3)).to(dtype)
    whole = run(sparse_attention_cpu, rowptr, col, q, k, v, dy)
    monkeypatch.setattr(cpu, "COLUMN_CHUNK_VALUES", 37 * 4 * 16)
    monkeypatch.setattr(cpu, "ROW_CHUNK_VALUES", 29 * 4 * 16)
    chunked = run(sparse_attention_cpu, rowptr, col, q, k, v, dy)
    for name, a, b in zip(("y", "dq", "dk", "dv"), chunked, whole):
        assert a.dtype == dtype and torch.equal(a, b), name


def test_bf16_score_gradients_move_dq_within_bf16_rounding(hub_graph, monkeypatch):
    """A bf16 backward keeps ds in bfloat16 between its passes (``DS_IN_BF16``): dk and dv do not read
    the kept ds and stay bit for bit; dq moves by bf16 roundings only, well inside the reference's
    bf16 tolerance; the exact fp32 path is untouched."""
    import dsgraph.ops.cpu as cpu

    rowptr, col = hub_graph
    results = {}
    for dtype in (torch.bfloat16, torch.float32):
        q, k, v = qkv(rowptr.numel() - 1, N_SRC, 4, 16, dtype)
        dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(6)).to(dtype)
        for half in (False, True):
            monkeypatch.setattr(cpu, "DS_IN_BF16", half)
            results[dtype, half] = run(sparse_attention_cpu, rowptr, col, q, k, v, dy)
    for name, i in (("y", 0), ("dk", 2), ("dv", 3)):
        assert torch.equal(results[torch.bfloat16, True][i], results[torch.bfloat16, False][i]), name
    assert all(torch.equal(a, b) for a, b in zip(results[torch.float32, True], results[torch.float32, False]))
    dq_half, dq_full = (results[torch.bfloat16, half][1].float() for half in (True, False))
    assert not torch.equal(dq_half, dq_full)  # the rounding is real ...
    assert_relative_close(dq_half, dq_full, 1e-2)  # ... and small
    assert_relative_close(dq_half, results[torch.float32, True][1], 2e-2)


@pytest.mark.parametrize("with_bias", [False, True], ids=["plain", "bias"])
def test_recomputed_probabilities_give_the_kept_ones_gradients(hub_graph, monkeypatch, with_bias):
    """Backward recomputes p from lse (the default) or reads the forward's p: the same gradients to
    fp32 rounding, the bias's too; only lse [N, H] is kept instead of p [E, H]."""
    import dsgraph.ops.cpu as cpu

    rowptr, col = hub_graph
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, 4, 16)
    gen = torch.Generator().manual_seed(4)
    bias = torch.randn(col.numel(), 4, generator=gen).requires_grad_(True) if with_bias else None
    dy = torch.randn(q.shape, generator=gen)
    results = {}
    for keep in (True, False):
        monkeypatch.setattr(cpu, "KEEP_PROBABILITIES", keep)
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v, *([bias] if with_bias else []))]
        y = sparse_attention(rowptr, col, *leaves[:3], bias=leaves[3] if with_bias else None, backend="cpu")
        results[keep] = [y, *torch.autograd.grad((y * dy).sum(), leaves)]
        saved = cpu.CpuBackend().forward(rowptr, col, q, k, v, 0.25)[2]
        assert [t.shape for t in saved] == (
            [(col.numel(), 4), (rowptr.numel() - 1, 4)] if keep else [(rowptr.numel() - 1, 4)]
        )
    for a, b in zip(results[False], results[True]):
        assert_relative_close(a, b, TOLERANCE[torch.float32])


@pytest.mark.skipif(not cpu_peak_supported(), reason="this kernel cannot reset the RSS high-water mark")
def test_no_edge_sized_activation():
    """Peak extra memory of forward+backward stays far below one E x H x D fp32 tensor, which the
    reference allocates several times (checked too, so the measurement is shown to work)."""
    n, heads, dim, edges = 2_000, 4, 16, 200_000
    gen = torch.Generator().manual_seed(0)
    col = torch.randint(0, n, (edges,), generator=gen, dtype=torch.int32)
    rowptr = torch.zeros(n + 1, dtype=torch.int64)
    rowptr[1:] = torch.sort(torch.randint(0, edges + 1, (n,), generator=gen)).values
    rowptr[-1] = edges
    q, k, v = qkv(n, n, heads, dim)
    dy = torch.randn(q.shape, generator=gen)
    edge_tensor_bytes = edges * heads * dim * 4
    run(sparse_attention_cpu, rowptr, col, q, k, v, dy)  # compile, build and cache the transpose

    _, fused = peak_extra_bytes(lambda: run(sparse_attention_cpu, rowptr, col, q, k, v, dy), q.device)
    _, reference = peak_extra_bytes(lambda: run(sparse_attention_reference, rowptr, col, q, k, v, dy), q.device)
    assert fused < 0.25 * edge_tensor_bytes, (fused, edge_tensor_bytes)
    assert reference > edge_tensor_bytes, (reference, edge_tensor_bytes)


def test_transpose_is_cached_and_correct(hub_graph):
    rowptr, col = hub_graph
    csc = transpose(rowptr, col, N_SRC)
    assert transpose(rowptr, col, N_SRC) is csc
    dst = torch.repeat_interleave(torch.arange(rowptr.numel() - 1), rowptr[1:] - rowptr[:-1])
    assert torch.equal(col[csc.perm].long(), torch.repeat_interleave(torch.arange(N_SRC), csc.colptr.diff()))
    assert torch.equal(csc.row.long(), dst[csc.perm])
    col_copy = col.clone()
    first = transpose(rowptr, col_copy, N_SRC)
    col_copy[0] = (int(col_copy[0]) + 1) % N_SRC  # an in-place edit must invalidate the cache
    rebuilt = transpose(rowptr, col_copy, N_SRC)
    assert rebuilt is not first and torch.equal(rebuilt.colptr, build_transpose(rowptr, col_copy, N_SRC).colptr)


def test_csc_slots_invert_the_transpose_and_are_cached(hub_graph):
    """CSR edge e is CSC edge slots[e]: the backward's row pass reads ds through it."""
    rowptr, col = hub_graph
    perm, slots = transpose(rowptr, col, N_SRC).perm, csc_slots(rowptr, col, N_SRC)
    assert slots.dtype == torch.int32  # below 2^31 edges
    assert torch.equal(slots[perm].long(), torch.arange(col.numel())) and torch.equal(
        perm[slots.long()], torch.arange(col.numel())
    )
    assert csc_slots(rowptr, col, N_SRC) is slots


def test_auto_dispatch_picks_cpu_and_matches():
    assert resolve_backend("auto", torch.device("cpu")) == "cpu"
    g = load_dataset("cora")
    q, k, v = qkv(g.num_nodes, g.num_nodes, 2, 8)
    auto = sparse_attention(g.rowptr, g.col, q, k, v)
    assert_relative_close(auto, sparse_attention(g.rowptr, g.col, q, k, v, backend="reference"), 1e-5)


def test_bad_index_is_a_value_error():
    rowptr = torch.tensor([0, 2], dtype=torch.int64)
    col = torch.tensor([0, 5], dtype=torch.int32)
    q, k, v = qkv(1, 3, 1, 8)
    with pytest.raises(ValueError, match="outside"):
        sparse_attention_cpu(rowptr, col, q, k, v, 1.0)


THREADS_PROBE = """
import torch
torch.set_num_threads(1)
import numba
from dsgraph.ops import sparse_attention
rowptr = torch.arange(0, 4097 * 64, 64)[:4097]
col = torch.randint(0, 4096, (4096 * 64,), dtype=torch.int32)
q, k, v = (torch.randn(4096, 8, 16, requires_grad=True) for _ in range(3))
sparse_attention(rowptr, col, q, k, v, backend="cpu").sum().backward()
print(torch.get_num_threads(), numba.get_num_threads())
"""


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores: numba's pool is then larger than 1 thread")
def test_kernels_keep_torch_thread_count():
    """The first kernel starts numba's OpenMP pool, which resets the process's OpenMP thread count
    to all cores; a rank limited to 1 thread (AGP profile, ranks sharing cores) must stay at 1."""
    out = subprocess.run([sys.executable, "-c", THREADS_PROBE], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.split() == ["1", "1"], out.stdout + out.stderr


# --- the kernels' edge cases (tests/ops/cases.py), run by the GPU tests for the cuda backend too ---
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])


def test_degree_cases_cover_every_bin():
    rowptr, col, n_src = cases.degree_edge_cases()
    rows, cols = (rowptr[1:] - rowptr[:-1]).tolist(), torch.bincount(col.long(), minlength=n_src).tolist()
    for degrees in (rows, cols):
        assert set(cases.LONG_DEGREES) <= set(degrees)  # one full chunk; a last chunk of one edge
        assert any(cases.SMALL_MAX < d <= cases.WARP_MAX for d in degrees)
    assert {0, 1, cases.SMALL_MAX} <= set(cols)  # silent sources and the small-column bin
    assert {0, cases.SMALL_MAX, cases.SMALL_MAX + 1, cases.WARP_MAX, cases.WARP_MAX + 1} <= set(rows)


@DTYPES
@pytest.mark.parametrize("dim", [8, 64])
def test_degree_edge_cases(dim, dtype):
    cases.check_degree_edge_cases("cpu", 4, dim, dtype, "cpu")


@DTYPES
@pytest.mark.parametrize("check", cases.EDGE_CASE_CHECKS, ids=cases.check_name)
def test_edge_case(check, dtype):
    """Empty graphs, int64 col, partial requires_grad, strided/misaligned inputs, bit-identical backward."""
    check("cpu", dtype, "cpu")
