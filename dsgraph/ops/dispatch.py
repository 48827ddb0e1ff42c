"""``sparse_attention``: one public function over registered backend objects.

Inputs are checked once per call for shapes and dtypes, and once per graph for indices (the scan is
cached with the graph, for every backend). ``backend="auto"`` takes the highest-priority backend
for the inputs' device that supports them, so CUDA tensors in fp64 or with an unusual head dim run
on the reference backend, with the reason logged once, instead of failing.
"""

from __future__ import annotations

import logging

import torch

from dsgraph.ops.backend import Backend, FusedBackend, check_graph, with_bias
from dsgraph.ops.csc import cached_per_graph

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float64)
_BACKENDS: dict[str, Backend] = {}
_LOGGED: set[str] = set()
log = logging.getLogger(__name__)


def register_backend(backend: Backend) -> None:
    """Makes ``backend`` selectable by its name and by ``auto``."""
    _BACKENDS[backend.name] = backend


def unregister_backend(name: str) -> None:
    _BACKENDS.pop(name, None)


def backend_names() -> list[str]:
    """Every registered backend, available on this machine or not."""
    return list(_BACKENDS)


def available_backends() -> list[str]:
    return [name for name, b in _BACKENDS.items() if b.available()]


def get_backend(name: str) -> Backend:
    """The registered backend ``name`` (not 'auto'); ValueError when unknown or unavailable here."""
    if name not in _BACKENDS:
        raise ValueError(f"unknown sparse attention backend '{name}'; choose from auto, {', '.join(_BACKENDS)}")
    backend = _BACKENDS[name]
    if not backend.available():
        raise ValueError(f"sparse attention backend '{name}' is not available on this machine")
    return backend


def _unsupported(backend: Backend, q: torch.Tensor, tensors: dict[str, torch.Tensor]) -> str:
    """The backend's own reason, or that it takes no score bias or edge values when ``tensors`` has them."""
    if "bias" in tensors and not backend.supports_bias:
        return "it takes no score bias"
    if "edge_values" in tensors and not backend.supports_edge_values:
        return "it takes no edge values (supports_edge_values; model.edge_features 'bias' needs none)"
    return backend.unsupported(q, tensors)


def backend_for(q: torch.Tensor, tensors: dict[str, torch.Tensor]) -> tuple[Backend, list[str]]:
    """The backend ``auto`` takes for these inputs, and why each better one for their device did not."""
    skipped = []
    ranked = sorted(_BACKENDS.values(), key=lambda b: -b.priority)
    for backend in ranked:
        if backend.device_type not in (None, q.device.type) or not backend.available():
            continue
        reason = _unsupported(backend, q, tensors)
        if not reason:
            return backend, skipped
        skipped.append(f"{backend.name}: {reason}")
    raise ValueError(f"sparse_attention: no backend runs these inputs ({'; '.join(skipped)})")


def resolve_backend(name: str, device: torch.device) -> str:
    """The backend ``name`` stands for on ``device`` for the usual inputs (fp32 or bf16, a common
    head dim): ``auto`` is the available backend of highest priority for the device. For matching
    profiles to runs; per call, ``backend_for_inputs`` decides."""
    if name != "auto":
        return get_backend(name).name
    ranked = sorted(_BACKENDS.values(), key=lambda b: -b.priority)
    return next(b.name for b in ranked if b.device_type in (None, device.type) and b.available())


def backend_for_inputs(name: str, q: torch.Tensor, tensors: dict[str, torch.Tensor] | None = None) -> Backend:
    """The backend that runs inputs like ``q`` for ``backend=name``; an explicit backend that cannot
    run them is a ValueError naming why."""
    tensors = tensors if tensors is not None else {"q": q}
    if name != "auto":
        backend = get_backend(name)
        reason = _unsupported(backend, q, tensors)
        if reason:
            raise ValueError(f"sparse_attention {name} backend: {reason}")
        return backend
    backend, skipped = backend_for(q, tensors)
    if skipped:
        _log_once(
            f"sparse_attention: backend 'auto' runs '{backend.name}' for {q.dtype} inputs with head dim "
            f"{q.shape[-1]} on {q.device.type} ({'; '.join(skipped)})"
        )
    return backend


def _log_once(message: str) -> None:
    if message not in _LOGGED:
        _LOGGED.add(message)
        log.warning(message)


def sparse_attention(
    rowptr: torch.Tensor,
    col: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    edge_values: torch.Tensor | None = None,
    scale: float | None = None,
    backend: str = "auto",
):
    """Graph attention of every destination row over its in-edges (SDDMM -> softmax -> SpMM).

    rowptr: int64 [N_dst+1]; col: int32/int64 [E] source ids in [0, N_src); q: [N_dst, H, D];
    k, v: [N_src, H, D]; bias: None or [E, H] in q's dtype, a finite score bias per edge and head in
    CSR order (edge e is col[e]'s edge), added to scale * <q_i, k_j> before the softmax. Returns
    y [N_dst, H, D] in q's dtype; rows with no in-edges give 0. ``scale`` defaults to D**-0.5.
    Differentiable in q, k, v and bias. ``edge_values``: None or u [E, C] in q's dtype (CSR order,
    constants: no gradient); then returns (y, z), z [N_dst, H, C] = sum_j a_ij u_ij
    (``edge_values.py``).

    q = k = None: constant scores, every row's mean of its in-neighbours' v (``mean.py``; no scores,
    no softmax, differentiable in v only; y in v's dtype); no bias or edge values then.
    """
    if q is None or k is None:
        return _constant_scores(rowptr, col, q, k, v, bias, edge_values, backend)
    _check_shapes(rowptr, col, q, k, v, bias)
    _check_edge_values(col, q, edge_values)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    tensors = _inputs(rowptr, col, q, k, v, bias)
    chosen = backend_for_inputs(backend, q, tensors if edge_values is None else {**tensors, "edge_values": edge_values})
    cached_per_graph(rowptr, col, ("checked", k.shape[0]), lambda: check_graph(rowptr, col, k.shape[0]))
    extra = with_bias(bias) if edge_values is None else {**with_bias(bias), "edge_values": edge_values}
    with torch.profiler.record_function(f"dsgraph/attention/{chosen.name}"):  # a named region in traces
        return chosen.attention(rowptr, col, q, k, v, scale, **extra)


def _constant_scores(rowptr, col, q, k, v, bias, edge_values, backend: str) -> torch.Tensor:
    """``sparse_attention`` with q = k = None: checks, then the chosen backend's mean."""
    if q is not None or k is not None:
        raise ValueError("sparse_attention: constant scores take q = k = None (both), got one of them")
    if bias is not None or edge_values is not None:
        raise ValueError("sparse_attention: constant scores (q = k = None) take no score bias or edge values")
    chosen = prepare_constant_scores(rowptr, col, v, backend)
    with torch.profiler.record_function(f"dsgraph/attention/{chosen.name}_mean"):
        return chosen.attention(rowptr, col, None, None, v, 0.0)


def prepare_constant_scores(rowptr, col, v, backend: str) -> Backend:
    """Checks for constant scores (q = k = None; shapes per call, indices once per graph); the backend."""
    _check_constant_scores(rowptr, col, v)
    chosen = backend_for_inputs(backend, v, {"rowptr": rowptr, "col": col, "v": v})
    cached_per_graph(rowptr, col, ("checked", v.shape[0]), lambda: check_graph(rowptr, col, v.shape[0]))
    return chosen


def _check_constant_scores(rowptr, col, v) -> None:
    if v.dim() != 3 or v.dtype not in FLOAT_DTYPES:
        raise ValueError(f"sparse_attention: v must be 3-D [N, H, D] in one of {FLOAT_DTYPES}, got {tuple(v.shape)}")
    if rowptr.dim() != 1 or rowptr.dtype != torch.int64 or rowptr.numel() < 1:
        raise ValueError("sparse_attention: rowptr must be int64 [N_dst+1]")
    if col.dim() != 1 or col.dtype not in (torch.int32, torch.int64):
        raise ValueError("sparse_attention: col must be a 1-D int32 or int64 tensor")


def _inputs(rowptr, col, q, k, v, bias) -> dict[str, torch.Tensor]:
    tensors = {"rowptr": rowptr, "col": col, "q": q, "k": k, "v": v}
    return tensors if bias is None else {**tensors, "bias": bias}


def _check_edge_values(col, q, edge_values) -> None:
    if edge_values is None:
        return
    if edge_values.dim() != 2 or edge_values.shape[0] != col.shape[0] or edge_values.dtype != q.dtype:
        raise ValueError(
            f"sparse_attention: edge_values must be [E, C] with E = {col.shape[0]} in q's dtype {q.dtype}, "
            f"got {tuple(edge_values.shape)} {edge_values.dtype}"
        )
    if edge_values.requires_grad:
        raise ValueError(
            "sparse_attention: edge_values take no gradient (they are constants such as edge features); detach them"
        )


def prepare_fused(rowptr, col, q, k, v, scale, backend, bias=None) -> tuple[FusedBackend, float]:
    """Checks (shapes per call, indices once per graph); the fused backend for the inputs and the scale."""
    _check_shapes(rowptr, col, q, k, v, bias)
    chosen = backend_for_inputs(backend, q, _inputs(rowptr, col, q, k, v, bias))
    if not isinstance(chosen, FusedBackend):
        raise ValueError(f"sparse attention backend '{chosen.name}' has no separate forward and backward passes")
    cached_per_graph(rowptr, col, ("checked", k.shape[0]), lambda: check_graph(rowptr, col, k.shape[0]))
    return chosen, q.shape[-1] ** -0.5 if scale is None else float(scale)


def _check_shapes(rowptr, col, q, k, v, bias=None) -> None:
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError("sparse_attention: q, k and v must be 3-D [N, H, D]")
    if k.shape != v.shape or q.shape[1:] != k.shape[1:]:
        raise ValueError(
            f"sparse_attention: shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not agree"
        )
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"sparse_attention: q, k, v must share one of {FLOAT_DTYPES}, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if rowptr.dim() != 1 or rowptr.numel() != q.shape[0] + 1 or rowptr.dtype != torch.int64:
        raise ValueError(f"sparse_attention: rowptr must be int64 [N_dst+1] = [{q.shape[0] + 1}]")
    if col.dim() != 1 or col.dtype not in (torch.int32, torch.int64):
        raise ValueError("sparse_attention: col must be a 1-D int32 or int64 tensor")
    if bias is not None and (bias.shape != (col.shape[0], q.shape[1]) or bias.dtype != q.dtype):
        raise ValueError(
            f"sparse_attention: bias must be [E, H] = [{col.shape[0]}, {q.shape[1]}] in q's dtype {q.dtype}, "
            f"got {tuple(bias.shape)} {bias.dtype}"
        )
