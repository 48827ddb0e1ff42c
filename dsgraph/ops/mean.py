"""Constant scores: each row's mean of its in-neighbours' v, the attention with every score equal.

``sparse_attention(rowptr, col, None, None, v)`` (q = k = None) is the attention whose scores are
all 0: a softmax of d equal scores is 1/d, so y_i = (1/d_i) sum_j v_j over the d_i in-edges of row
i (0 for rows without edges), and its log-sum-exp is lse_i = log d_i in every head (-inf without
edges). Nothing else is computed: no scores (SDDMM), no softmax, and backward gives dv only,
dv_j = sum_i dy_i / d_i over the out-edges of j (the transpose of the graph). Because lse is the
attention's, blocks of sources merge exactly as attention blocks do (``blocks.merge``), and each
block's backward on the weighted dy_i w_i, w_i = d_block_i / d_i, is its share of dv.
GCN and SAGE layers (``dsgraph/models/conv.py``) aggregate through it.

A fused backend runs it as ``MeanAggregation`` over its ``mean_forward`` and ``mean_backward``.
Their defaults, here, are torch's sparse CSR matmul on the inputs' device, in fp32 (fp64 for fp64
inputs): the CUDA backend runs these (it has no kernel of its own for constant scores; cuSPARSE's
SpMM, no E x H x D tensor). The CPU backend has numba kernels (``cpu/mean_kernels.py``); the
reference backend computes the oracle's formulas (``reference.py``, scores 0).
"""

from __future__ import annotations

import warnings

import torch
from torch.autograd.function import once_differentiable

from dsgraph.ops.csc import transpose


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def inverse_degrees(rowptr: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[N_dst] 1/d_i, 0 for rows without edges, in ``dtype``."""
    degrees = rowptr.diff().to(dtype)
    return torch.where(degrees > 0, 1 / degrees.clamp_min(1), torch.zeros_like(degrees))


def mean_lse(rowptr: torch.Tensor, heads: int, dtype: torch.dtype) -> torch.Tensor:
    """[N_dst, H] log d_i (-inf for rows without edges): the log-sum-exp of d_i zero scores."""
    return torch.log(rowptr.diff().to(dtype))[:, None].expand(-1, heads).contiguous()


def torch_mean_forward(rowptr, col, v) -> tuple[torch.Tensor, torch.Tensor]:
    """(y [N_dst, H, D], lse [N_dst, H]) in the accumulation dtype, by a sparse CSR matmul whose
    values are each edge's 1/d_i."""
    acc = accumulation_dtype(v.dtype)
    n_dst, (n_src, heads, dim) = rowptr.numel() - 1, v.shape
    weights_E = torch.repeat_interleave(inverse_degrees(rowptr, acc), rowptr.diff(), output_size=col.numel())
    y = (_csr(rowptr, col, weights_E, (n_dst, n_src)) @ v.detach().reshape(n_src, heads * dim).to(acc)).view(
        n_dst, heads, dim
    )
    return y, mean_lse(rowptr, heads, acc)


def torch_mean_backward(rowptr, col, dy, n_src: int) -> torch.Tensor:
    """dv [N_src, H, D] in the accumulation dtype: the transpose's sparse CSR matmul with dy."""
    acc = accumulation_dtype(dy.dtype)
    n_dst, heads, dim = dy.shape
    csc = transpose(rowptr, col, n_src)
    weights_E = inverse_degrees(rowptr, acc)[csc.row.long()]
    return (
        _csr(csc.colptr, csc.row, weights_E, (n_src, n_dst)) @ dy.detach().reshape(n_dst, heads * dim).to(acc)
    ).view(n_src, heads, dim)


def _csr(ptr, index, values, size) -> torch.Tensor:
    """A torch sparse CSR matrix; its indices were checked once per graph (``check_graph``), so
    torch's invariant scan is off, and its 'beta' notice is not repeated on every call."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(ptr, index.long(), values, size, check_invariants=False)


class MeanAggregation(torch.autograd.Function):
    """y = mean over in-edges of v through a fused backend's ``mean_forward`` / ``mean_backward``;
    backward needs only the graph (nothing is saved but its shape)."""

    @staticmethod
    def forward(ctx, backend, rowptr, col, v):
        y_acc, _ = backend.mean_forward(rowptr, col, v.detach())
        ctx.backend, ctx.graph, ctx.n_src = backend, (rowptr, col), v.shape[0]
        return y_acc.to(v.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        with torch.profiler.record_function(f"dsgraph/attention/{ctx.backend.name}_mean_backward"):
            dv = ctx.backend.mean_backward(*ctx.graph, dy.detach(), ctx.n_src)
        return None, None, None, dv.to(dy.dtype)
