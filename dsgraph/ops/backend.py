"""Sparse attention backends as objects, and the one autograd Function every fused backend runs.

A backend is one implementation of the op's contract (``reference.py`` states it). It says which
inputs it can run (``unsupported``), and computes ``attention``. A *fused* backend brings its own
forward and backward kernels instead of torch's autograd: its forward returns the output in the
accumulation dtype, the per-(row, head) log-sum-exp and ``saved``, the tensors its own backward
reads (the CPU kernels keep the probabilities p [E, H], the CUDA kernels only the log-sum-exp).
A backend with ``supports_bias`` also takes the optional score bias [E, H] (CSR order, the inputs'
dtype) as the keyword ``bias`` and returns its gradient ds [E, H] as a fourth backward result; it
is passed only when there is one, so a backend without it needs no change. A backend with
``supports_edge_values`` also returns the attention-weighted sum of per-edge values
(``edge_values.py``): a fused one from its kernels when it ``keeps_probabilities``, else from its
log-sum-exp, recomputing the probabilities in torch around its unchanged kernels.
With q = k = None (constant scores: each row's mean of its in-neighbours' v, ``mean.py``) a fused
backend runs ``mean_forward`` and ``mean_backward`` instead (torch's sparse matmul unless it has
kernels of its own). ``FusedAttention`` saves q, k, v, that output and ``saved``, and hands backward detached tensors (a
kernel library reads them through DLPack, which refuses tensors that require grad; in fp32 the
saved output is the Function's own output).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch.autograd.function import once_differentiable

from dsgraph.ops.edge_values import FusedEdgeValues, RecomputedEdgeValues, edge_value_grad, edge_value_sum
from dsgraph.ops.mean import MeanAggregation, torch_mean_backward, torch_mean_forward

INT32_MAX = 2**31 - 1


class Backend(ABC):
    """``name`` selects it (``backend=name``); ``backend="auto"`` takes the available backend of
    highest ``priority`` whose ``device_type`` is the inputs' (None: any device) and that supports
    the inputs."""

    name: str = ""
    priority: int = 0
    device_type: str | None = None
    supports_bias: bool = False
    """Whether ``attention`` (and a fused backend's passes) take the score bias (``bias=``)."""
    supports_edge_values: bool = False
    """Whether ``attention`` takes ``edge_values=`` [E, C] and returns (y, z) (``edge_values.py``); a
    fused backend's path depends on ``keeps_probabilities``."""

    def available(self) -> bool:
        """Whether this machine can run the backend at all (libraries, devices)."""
        return True

    def unsupported(self, q: torch.Tensor, tensors: dict[str, torch.Tensor]) -> str:
        """'' when the backend can run inputs like ``q`` (dtype, head dim, device; ``tensors`` names
        every input, graph included), else the reason it cannot. Shape checks only: no data scans.
        For constant scores (q = k = None) ``q`` is v and ``tensors`` has no 'q'."""
        return ""

    @abstractmethod
    def attention(self, rowptr, col, q, k, v, scale: float) -> torch.Tensor:
        """y [N_dst, H, D] in q's dtype, differentiable in q, k and v (the contract in reference.py);
        a backend with ``supports_bias`` also takes ``bias=`` [E, H] and is differentiable in it.
        q = k = None: constant scores, y in v's dtype (``mean.py``)."""


class FusedBackend(Backend):
    """A backend with forward and backward kernels of its own (run through ``FusedAttention``)."""

    delta_from_output: bool = False
    """Whether backward reads delta_i = <dy_i, y_i> from the output in the inputs' dtype (as
    FlashAttention does) rather than from the accumulation-dtype output: ``FusedAttention`` then keeps
    the output itself, which the next layer keeps anyway, and not an fp32 copy of it for bf16 inputs
    (the same tensor in fp32)."""

    keeps_probabilities: bool = False
    """Whether its forward can keep the probabilities (``forward(..., keep_probabilities=True)``),
    which ``probabilities(saved)`` then returns (p [E, H], CSR order), and backward takes ``dp_extra``
    [E, H] and ``delta_extra`` [N_dst, H]:
    edge values then ride the kernels (``FusedEdgeValues``). Without (a backend that keeps only the
    log-sum-exp), edge values recompute p from lse in torch, in edge chunks, around the backend's
    unchanged forward and backward (``RecomputedEdgeValues``)."""

    @abstractmethod
    def forward(
        self, rowptr, col, q, k, v, scale: float
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """Returns (y [N_dst, H, D] and lse [N_dst, H], both in the accumulation dtype (fp32 for fp32
        and bf16 inputs; lse -inf and y 0 for rows without edges), and ``saved``: the tensors this
        backend's backward reads besides q, k, v, y (and the bias))."""

    @abstractmethod
    def backward(self, rowptr, col, q, k, v, y_acc, saved, dy, scale: float, needs: tuple[bool, bool, bool]):
        """Returns (dq, dk, dv) in the inputs' dtypes for the upstream gradient dy, given forward's y
        (accumulation dtype; the output itself where ``delta_from_output``) and ``saved``; an entry
        whose ``needs`` flag is False may be None. With ``bias=`` (``supports_bias``), also dbias =
        ds [E, H] in the bias's dtype (``needs`` then has a fourth flag, for it)."""

    def value_sum(self, rowptr, col, p_EH, u_EC) -> torch.Tensor:
        """z [N_dst, H, C] = sum over each row's edges of p[e, h] u[e, c] (edge values' forward), in
        p's dtype: torch's ``edge_value_sum`` unless the backend has a kernel of its own."""
        return edge_value_sum(rowptr, col, p_EH, u_EC)

    def value_grad(self, rowptr, col, dz_NHC, u_EC) -> torch.Tensor:
        """g [E, H] = <dz[dst(e), h], u[e]> (edge values' backward), in dz's dtype: torch's
        ``edge_value_grad`` unless the backend has a kernel of its own."""
        return edge_value_grad(rowptr, col, dz_NHC, u_EC)

    def mean_forward(self, rowptr, col, v) -> tuple[torch.Tensor, torch.Tensor]:
        """Constant scores (``mean.py``): (y [N_dst, H, D], lse [N_dst, H] = log in-degree), both in
        the accumulation dtype; torch's sparse matmul unless the backend has a kernel of its own."""
        return torch_mean_forward(rowptr, col, v)

    def mean_backward(self, rowptr, col, dy, n_src: int) -> torch.Tensor:
        """Constant scores: dv [N_src, H, D] in the accumulation dtype, dv_j = sum_i dy_i / d_i over
        the out-edges of j; torch's sparse matmul unless the backend has a kernel of its own."""
        return torch_mean_backward(rowptr, col, dy, n_src)

    def attention(self, rowptr, col, q, k, v, scale: float, bias=None, edge_values=None):
        if q is None:  # constant scores: dispatch has checked that k, bias and edge values are None too
            return MeanAggregation.apply(self, rowptr, col, v)
        if edge_values is not None:
            path = FusedEdgeValues if self.keeps_probabilities else RecomputedEdgeValues
            return path.apply(self, rowptr, col, q, k, v, scale, bias, edge_values)
        return FusedAttention.apply(self, rowptr, col, q, k, v, scale, bias)


def with_bias(bias) -> dict:
    """The keyword arguments that hand a backend the score bias: none without one."""
    return {} if bias is None else {"bias": bias}


class FusedAttention(torch.autograd.Function):
    """Forward and backward of a ``FusedBackend``; the graph is non-tensor context (its cached
    structures, such as the transpose, are keyed by the graph tensors)."""

    @staticmethod
    def forward(ctx, backend: FusedBackend, rowptr, col, q, k, v, scale, bias=None):
        bias_ = None if bias is None else bias.detach()
        y_acc, _, saved = backend.forward(rowptr, col, q.detach(), k.detach(), v.detach(), scale, **with_bias(bias_))
        y = y_acc.to(q.dtype)
        kept = y if backend.delta_from_output else y_acc
        ctx.save_for_backward(q, k, v, kept, *(() if bias is None else (bias,)), *saved)
        ctx.backend, ctx.graph, ctx.scale, ctx.has_bias = backend, (rowptr, col), scale, bias is not None
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        q, k, v, y_acc, *saved = (t.detach() for t in ctx.saved_tensors)
        bias = saved.pop(0) if ctx.has_bias else None
        needs = tuple(ctx.needs_input_grad[3:6]) + ((ctx.needs_input_grad[7],) if ctx.has_bias else ())
        with torch.profiler.record_function(
            f"dsgraph/attention/{ctx.backend.name}_backward"
        ):  # autograd runs it outside the forward's region
            grads = ctx.backend.backward(
                *ctx.graph, q, k, v, y_acc, tuple(saved), dy.detach(), ctx.scale, needs, **with_bias(bias)
            )
        dbias = grads[3] if ctx.has_bias and ctx.needs_input_grad[7] else None
        return None, None, None, *(g if need else None for g, need in zip(grads[:3], needs[:3])), None, dbias


def check_graph(rowptr: torch.Tensor, col: torch.Tensor, n_src: int) -> bool:
    """ValueErrors for a graph the kernels cannot index safely (they do no bounds checks): rowptr
    monotone from 0 to the edge count, every col entry in [0, n_src). One scan (and one device
    synchronisation); ``dispatch`` caches the result per graph. Meta tensors carry no values."""
    if rowptr.device.type == "meta":
        return True
    edges = col.numel()
    if int(rowptr[0]) != 0 or int(rowptr[-1]) != edges:
        raise ValueError(f"sparse_attention: rowptr must start at 0 and end at the edge count {edges}")
    if rowptr.numel() > 1 and bool((rowptr[1:] < rowptr[:-1]).any()):
        raise ValueError("sparse_attention: rowptr is not monotone")
    if edges and (int(col.min()) < 0 or int(col.max()) >= n_src):
        raise ValueError(f"sparse_attention: an index in 'col' is outside [0, {n_src}) (the rows of k and v)")
    return True


def on_one_device(tensors: dict[str, torch.Tensor], device_type: str) -> str:
    """'' when every tensor is on one device of ``device_type``, else which one is not."""
    first = next(iter(tensors.values())).device
    for name, t in tensors.items():
        if t.device.type != device_type or t.device != first:
            return f"all inputs must be on one {device_type} device; '{name}' is on {t.device}"
    return ""
