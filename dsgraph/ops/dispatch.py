"""``sparse_attention``: one public function, backends registered by name, inputs checked once."""

from __future__ import annotations

from typing import Callable

import torch

from dsgraph.ops.reference import sparse_attention_reference

# name -> (is_available() -> bool, fn(rowptr, col, q, k, v, scale) -> y)
_BACKENDS: dict[str, tuple[Callable[[], bool], Callable]] = {
    "reference": (lambda: True, sparse_attention_reference),
}
FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float64)


def register_backend(name: str, is_available: Callable[[], bool], fn: Callable) -> None:
    _BACKENDS[name] = (is_available, fn)


def available_backends() -> list[str]:
    return [name for name, (ok, _) in _BACKENDS.items() if ok()]


def resolve_backend(backend: str, device: torch.device) -> str:
    if backend == "auto":
        preferred = "cuda" if device.type == "cuda" else "cpu"
        return preferred if preferred in available_backends() else "reference"
    if backend not in _BACKENDS:
        raise ValueError(f"unknown sparse attention backend '{backend}'; choose from auto, {', '.join(_BACKENDS)}")
    if not _BACKENDS[backend][0]():
        raise ValueError(f"sparse attention backend '{backend}' is not available on this machine")
    return backend


def sparse_attention(
    rowptr: torch.Tensor,
    col: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Graph attention of every destination row over its in-edges (SDDMM -> softmax -> SpMM).

    rowptr: int64 [N_dst+1]; col: int32/int64 [E] source ids in [0, N_src); q: [N_dst, H, D];
    k, v: [N_src, H, D]. Returns y [N_dst, H, D] in q's dtype; rows with no in-edges give 0.
    ``scale`` defaults to D**-0.5. Differentiable in q, k and v.
    """
    _check_inputs(rowptr, col, q, k, v)
    if scale is None:
        scale = q.shape[-1] ** -0.5
    name = resolve_backend(backend, q.device)
    with torch.profiler.record_function(f"dsgraph/attention/{name}"):  # a named region in traces
        return _BACKENDS[name][1](rowptr, col, q, k, v, float(scale))


def _check_inputs(rowptr, col, q, k, v) -> None:
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError("sparse_attention: q, k and v must be 3-D [N, H, D]")
    if k.shape != v.shape or q.shape[1:] != k.shape[1:]:
        raise ValueError(f"sparse_attention: shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not agree")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in FLOAT_DTYPES:
        raise ValueError(f"sparse_attention: q, k, v must share one of {FLOAT_DTYPES}, got {q.dtype}, {k.dtype}, {v.dtype}")
    if rowptr.dim() != 1 or rowptr.numel() != q.shape[0] + 1 or rowptr.dtype != torch.int64:
        raise ValueError(f"sparse_attention: rowptr must be int64 [N_dst+1] = [{q.shape[0] + 1}]")
    if col.dim() != 1 or col.dtype not in (torch.int32, torch.int64):
        raise ValueError("sparse_attention: col must be a 1-D int32 or int64 tensor")
