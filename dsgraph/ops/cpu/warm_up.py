"""Compiling the CPU kernels before a run loads its graph.

numba compiles a kernel on its first call (and caches it on disk for later processes). A fresh
install, or any change to a kernel's source, therefore compiles in the first training step, while
the step's activations are alive; LLVM's working memory then lands on the run's peak (measured:
rmat:21, 2 ranks, bf16, 6,705 MB per rank on the first run against 5,116 MB with the kernels
cached). ``compile_kernels`` runs each kernel a training step calls once, on a tiny graph, so the
compile happens before the graph is loaded and its memory is reused afterwards. With the cache
warm it costs about a second.

A kernel is compiled once per combination of its arguments' types, not sizes, so one tiny
forward and backward in the run's dtype compiles what every step of that dtype runs: the
attention (its forward, the deltas, the column and row passes; with or without a score bias the
types are the same) and the constant-score mean (``gcn``, ``sage``).
"""

from __future__ import annotations

import torch

NODES, DEGREE, HEADS, DIM = 16, 3, 2, 8


def compile_kernels(dtype: torch.dtype) -> None:
    """Runs the CPU attention and mean kernels forward and backward once in ``dtype`` (the run's:
    float32 or bfloat16) on a small ring graph; the result is thrown away."""
    from dsgraph.ops.dispatch import sparse_attention

    rowptr = torch.arange(0, NODES * DEGREE + 1, DEGREE, dtype=torch.int64)
    col = ((torch.arange(NODES)[:, None] + torch.arange(DEGREE)) % NODES).reshape(-1).to(torch.int32)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(NODES, HEADS, DIM, generator=gen).to(dtype).requires_grad_(True) for _ in range(3))
    y = sparse_attention(rowptr, col, q, k, v, backend="cpu")
    mean = sparse_attention(rowptr, col, None, None, v, backend="cpu")
    torch.autograd.backward((y, mean), (torch.ones_like(y), torch.ones_like(mean)))
