"""Shared inputs and comparisons for the sparse attention backend tests (CPU and GPU)."""

from __future__ import annotations

import torch

from dsgraph.graph import load_dataset

HUB_DEGREE = 20_000  # in-edges of the hub row: several chunks in the CUDA long-row schedule
HUB_COLUMN_ROWS = 6_000  # rows that attend to source 0 (and one random source): a long CSC column
N_SRC = 512
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}  # relative, see assert_relative_close


def rmat_with_hub(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """An R-MAT power-law graph on N_SRC nodes (with rows that have no edges), then a hub row with
    HUB_DEGREE random in-edges, then HUB_COLUMN_ROWS rows with two in-edges each, one from source 0.
    Returns rowptr int64 [N_dst+1] and col int32 [E] with sources in [0, N_SRC)."""
    g = load_dataset(f"rmat:{N_SRC.bit_length() - 1}", seed=seed)
    gen = torch.Generator().manual_seed(seed)
    hub_col = torch.randint(0, N_SRC, (HUB_DEGREE,), generator=gen, dtype=torch.int32)
    pair_col = torch.randint(1, N_SRC, (HUB_COLUMN_ROWS, 2), generator=gen, dtype=torch.int32)
    pair_col[:, 0] = 0
    end = g.rowptr[-1]
    rowptr = torch.cat([g.rowptr, end + HUB_DEGREE + 2 * torch.arange(HUB_COLUMN_ROWS + 1)])
    return rowptr, torch.cat([g.col, hub_col, pair_col.flatten()])


def source_blocks(rowptr: torch.Tensor, col: torch.Tensor, bounds) -> list[tuple]:
    """A CSR per block of sources [lo, hi) (``bounds``), with local source ids: (rowptr, col int32,
    lo, hi, keep), ``keep`` the block's edges in the whole CSR (CSR order kept), for per-edge slices."""
    dst = torch.repeat_interleave(torch.arange(rowptr.numel() - 1, device=rowptr.device), rowptr.diff())
    parts = []
    for lo, hi in bounds:
        keep = ((col >= lo) & (col < hi)).nonzero().squeeze(1)
        block_rowptr = torch.zeros_like(rowptr)
        block_rowptr[1:] = torch.cumsum(torch.bincount(dst[keep], minlength=rowptr.numel() - 1), 0)
        parts.append((block_rowptr, (col[keep] - lo).to(torch.int32), lo, hi, keep))
    return parts


def qkv(n_dst: int, n_src: int, heads: int, dim: int, dtype=torch.float32, seed: int = 0, device="cpu"):
    """q [n_dst, H, D], k, v [n_src, H, D], standard normal, requiring grad."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(n_dst, heads, dim, generator=gen)
    k = torch.randn(n_src, heads, dim, generator=gen)
    v = torch.randn(n_src, heads, dim, generator=gen)
    return [t.to(device, dtype).requires_grad_() for t in (q, k, v)]


def run(fn, rowptr, col, q, k, v, dy):
    """y and (dq, dk, dv) of ``fn`` for the upstream gradient dy."""
    y = fn(rowptr, col, q, k, v, q.shape[-1] ** -0.5)
    return (y, *torch.autograd.grad(y, (q, k, v), dy))


def run_reference_fp32(fn, rowptr, col, q, k, v, dy):
    """``run`` on fp32 copies of the inputs: the oracle for bf16 backends, since the reference's own
    bf16 backward sums gathered gradients in bf16 (~10x less accurate than fp32 accumulation)."""
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    return run(fn, rowptr, col, q32, k32, v32, dy.float())


def assert_relative_close(actual, expected, rel):
    """Elementwise |a - e| <= rel * (|e| + max|e|): relative to each tensor's own scale."""
    actual, expected = actual.float(), expected.float()
    scale = expected.abs().max().item()
    torch.testing.assert_close(actual, expected, rtol=rel, atol=rel * scale)


# --- the kernels' edge cases, shared by the CPU and GPU tests (called through the public API) ------
# Degree bins of the CUDA schedule (dsgraph/ops/cuda_plan.py): small <= 16 edges, warp <= 1024, long
# beyond in chunks of 4096 edges; a long segment of 4097 or 8193 edges ends with a one-edge chunk.
SMALL_MAX, WARP_MAX, CHUNK_EDGES = 16, 1024, 4096
LONG_DEGREES = (4096, 4097, 8193)
EDGE_ROW_DEGREES = (0, 0, 0, SMALL_MAX, SMALL_MAX + 1, WARP_MAX, WARP_MAX + 1, *LONG_DEGREES)
N_BULK = 512  # sources of the high-degree rows: about 36 out-edges each (warp-bin columns)


def public(backend: str):
    """``fn(rowptr, col, q, k, v, scale, bias=None)`` through ``dsgraph.ops.sparse_attention`` with ``backend``."""
    from dsgraph.ops import sparse_attention

    def fn(rowptr, col, q, k, v, scale, bias=None):
        return sparse_attention(rowptr, col, q, k, v, bias=bias, scale=scale, backend=backend)

    return fn


def score_bias(num_edges: int, heads: int, dtype=torch.float32, seed: int = 11, device="cpu") -> torch.Tensor:
    """A score bias [E, H] of the scale of the scores (standard normal), requiring grad."""
    bias = torch.randn(num_edges, heads, generator=torch.Generator().manual_seed(seed))
    return bias.to(device, dtype).requires_grad_()


def degree_edge_cases(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
    """A graph whose rows AND columns (sources) fall in every bin and on every chunk boundary:

    sources 0-2 have 4096, 4097 and 8193 out-edges (long CSC columns); sources 3-18 have 1..16
    (small columns); sources 19-22 none; sources 23.. (N_BULK) feed the rows of EDGE_ROW_DEGREES
    (empty, 16, 17, 1024, 1025, 4096, 4097, 8193 in-edges). Rows are shuffled. Returns rowptr,
    col (int32) and the source count."""
    gen = torch.Generator().manual_seed(seed)
    rows: list[list[int]] = [[c for c, d in enumerate(LONG_DEGREES) if r < d] for r in range(max(LONG_DEGREES))]
    rows += [[3 + j for j in range(SMALL_MAX) if j >= i] for i in range(SMALL_MAX)]  # source 3 + j: j + 1 rows
    bulk0 = 3 + SMALL_MAX + 4
    rows += [(bulk0 + torch.randint(0, N_BULK, (d,), generator=gen)).tolist() for d in EDGE_ROW_DEGREES]
    order = torch.randperm(len(rows), generator=gen).tolist()
    rows = [rows[i] for i in order]
    rowptr = torch.zeros(len(rows) + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(torch.tensor([len(r) for r in rows]), 0)
    col = torch.tensor([c for r in rows for c in r], dtype=torch.int32)
    return rowptr, col, bulk0 + N_BULK


def grads_of(fn, rowptr, col, q, k, v, dy, bias=None):
    """y and the gradients of the inputs that require grad (None for the others); with a ``bias``,
    its gradient last."""
    inputs = (q, k, v) if bias is None else (q, k, v, bias)
    y = (
        fn(rowptr, col, q, k, v, q.shape[-1] ** -0.5)
        if bias is None
        else fn(rowptr, col, q, k, v, q.shape[-1] ** -0.5, bias)
    )
    wanted = [t for t in inputs if t.requires_grad]
    got = iter(torch.autograd.grad(y, wanted, dy)) if wanted else iter(())
    return (y, *(next(got) if t.requires_grad else None for t in inputs))


def check_against_reference(backend, rowptr, col, q, k, v, dy, rel=None, bias=None):
    """``backend``'s y and input gradients (the bias's too, when given) against the fp32 reference;
    returns the backend's."""
    from dsgraph.ops import sparse_attention_reference

    got = grads_of(public(backend), rowptr, col, q, k, v, dy, bias)
    q32, k32, v32 = (t.detach().float().requires_grad_(t.requires_grad) for t in (q, k, v))
    bias32 = None if bias is None else bias.detach().float().requires_grad_(bias.requires_grad)
    want = grads_of(sparse_attention_reference, rowptr, col, q32, k32, v32, dy.float(), bias32)
    for name, a, b in zip(("y", "dq", "dk", "dv", "dbias"), got, want):
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.dtype == q.dtype and a.shape == b.shape, name
            assert_relative_close(a, b.to(q.dtype), rel or TOLERANCE[q.dtype])
    return got


def check_degree_edge_cases(backend, heads, dim, dtype, device):
    rowptr, col, n_src = (t.to(device) if torch.is_tensor(t) else t for t in degree_edge_cases())
    q, k, v = qkv(rowptr.numel() - 1, n_src, heads, dim, dtype, seed=4, device=device)
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(5)).to(device, dtype)
    y, _, dk, dv = check_against_reference(backend, rowptr, col, q, k, v, dy)
    silent = torch.bincount(col.long(), minlength=n_src) == 0
    assert bool(silent.any()) and bool((dk[silent] == 0).all()) and bool((dv[silent] == 0).all())
    assert bool((y[rowptr[1:] == rowptr[:-1]] == 0).all())


def check_empty_graphs(backend, dtype, device):
    """No edges (every row empty), and no destination rows at all."""
    heads, dim = 2, 16
    for n_dst in (5, 0):
        rowptr = torch.zeros(n_dst + 1, dtype=torch.int64, device=device)
        col = torch.zeros(0, dtype=torch.int32, device=device)
        q, k, v = qkv(n_dst, 7, heads, dim, dtype, device=device)
        dy = torch.randn(n_dst, heads, dim, generator=torch.Generator().manual_seed(6)).to(device, dtype)
        y, dq, dk, dv = grads_of(public(backend), rowptr, col, q, k, v, dy)
        assert y.shape == (n_dst, heads, dim) and y.dtype == dtype and bool((y == 0).all())
        assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
        assert not any(bool(g.any()) for g in (dq, dk, dv)), f"non-zero gradient with no edges (n_dst={n_dst})"


def check_int64_col(backend, dtype, device):
    rowptr, col = (t.to(device) for t in rmat_with_hub())
    q, k, v = qkv(rowptr.numel() - 1, N_SRC, 4, 16, dtype, device=device)
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(7)).to(device, dtype)
    as_int32 = grads_of(public(backend), rowptr, col, q, k, v, dy)
    as_int64 = check_against_reference(backend, rowptr, col.long(), q, k, v, dy)
    for a, b in zip(as_int32, as_int64):
        assert torch.equal(a, b)


def check_partial_requires_grad(backend, dtype, device):
    """Gradients only for the inputs that require them, each equal to the reference's."""
    rowptr, col = (t.to(device) for t in rmat_with_hub())
    dy = torch.randn(rowptr.numel() - 1, 4, 16, generator=torch.Generator().manual_seed(8)).to(device, dtype)
    for need in ((True, False, False), (False, True, True), (False, False, True), (True, True, False)):
        q, k, v = (
            t.detach().requires_grad_(r)
            for t, r in zip(qkv(rowptr.numel() - 1, N_SRC, 4, 16, dtype, device=device), need)
        )
        check_against_reference(backend, rowptr, col, q, k, v, dy)


def misaligned(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of t whose data starts one element past a 16-byte boundary."""
    flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:]
    out = flat.view(t.shape).copy_(t.detach())
    assert out.is_contiguous() and out.data_ptr() % 16 != 0
    return out


def check_strided_and_misaligned(backend, dtype, device):
    """Non-contiguous views (a slice, transposes) and contiguous misaligned tensors, dy too."""
    rowptr, col = (t.to(device) for t in rmat_with_hub())
    n_dst, heads, dim = rowptr.numel() - 1, 4, 32
    gen = torch.Generator().manual_seed(9)
    q_base = torch.randn(n_dst, 3, heads, dim, generator=gen).to(device, dtype)
    kv_base = torch.randn(heads, N_SRC, 2, dim, generator=gen).to(device, dtype)
    dy_base = torch.randn(n_dst, dim, heads, generator=gen).to(device, dtype)
    strided = (
        q_base[:, 1],
        kv_base[:, :, 0].transpose(0, 1),
        kv_base[:, :, 1].transpose(0, 1),
        dy_base.transpose(1, 2),
    )
    assert not any(t.is_contiguous() for t in strided)
    for q, k, v, dy in (strided, tuple(misaligned(t) for t in strided)):
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        check_against_reference(backend, rowptr, col, q, k, v, dy)


def check_backward_bit_identical(backend, dtype, device):
    rowptr, col, n_src = (t.to(device) if torch.is_tensor(t) else t for t in degree_edge_cases())
    q, k, v = qkv(rowptr.numel() - 1, n_src, 4, 16, dtype, device=device)
    dy = torch.randn(q.shape, generator=torch.Generator().manual_seed(10)).to(device, dtype)
    first = grads_of(public(backend), rowptr, col, q, k, v, dy)
    second = grads_of(public(backend), rowptr, col, q, k, v, dy)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


EDGE_CASE_CHECKS = (
    check_empty_graphs,
    check_int64_col,
    check_partial_requires_grad,
    check_strided_and_misaligned,
    check_backward_bit_identical,
)
"""The dtype-parametrised checks every backend's tests run: ``check(backend, dtype, device)``."""


def check_name(check) -> str:
    return check.__name__.removeprefix("check_")


def check_edge_values(backend, rowptr, col, n_src, heads, dim, dtype, device, *, with_bias=True, channels=3, rel=None):
    """``backend``'s (y, z) with edge values u [E, C] (``dsgraph/ops/edge_values.py``) and the
    gradients of q, k, v (and the bias) for a loss that reads y and z, against the fp32 reference;
    z is 0 on rows without edges. Returns the backend's (y, z, dq, dk, dv[, dbias])."""
    from dsgraph.ops import sparse_attention

    q, k, v = qkv(rowptr.numel() - 1, n_src, heads, dim, dtype, seed=12, device=device)
    bias = score_bias(col.numel(), heads, dtype, device=device) if with_bias else None
    gen = torch.Generator().manual_seed(13)
    u = torch.randn(col.numel(), channels, generator=gen).to(device, dtype)
    dy = torch.randn(q.shape, generator=gen).to(device, dtype)
    dz = torch.randn(q.shape[0], heads, channels, generator=gen).to(device, dtype)

    def y_z_grads(name, q, k, v, bias, u, dy, dz):
        y, z = sparse_attention(rowptr, col, q, k, v, bias=bias, edge_values=u, backend=name)
        inputs = (q, k, v) if bias is None else (q, k, v, bias)
        return (y, z, *torch.autograd.grad((y, z), inputs, (dy, dz)))

    got = y_z_grads(backend, q, k, v, bias, u, dy, dz)
    fp32 = [None if t is None else t.detach().float().requires_grad_() for t in (q, k, v, bias)]
    want = y_z_grads("reference", *fp32, u.float(), dy.float(), dz.float())
    for name, a, b in zip(("y", "z", "dq", "dk", "dv", "dbias"), got, want):
        assert a.dtype == dtype and a.shape == b.shape, name
        try:
            assert_relative_close(a, b.to(dtype), rel or TOLERANCE[dtype])
        except AssertionError as error:
            raise AssertionError(f"{backend} edge values: {name} differs from the reference\n{error}") from None
    assert bool((got[1][rowptr[1:] == rowptr[:-1]] == 0).all())
    return got
