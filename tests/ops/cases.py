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
