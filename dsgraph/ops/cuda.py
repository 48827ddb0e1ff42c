"""The CUDA backend of ``sparse_attention``: CuPy loads cuda/*.cu, torch owns every tensor.

Kernels are compiled at run time by NVRTC (CuPy ``RawModule``), once per (device, file, dtype,
head dim, score bias or not), and launched on torch's current stream on zero-copy DLPack views of torch tensors
(outputs are allocated by torch, so memory stays in torch's caching allocator). Importing this
module never fails: without CuPy or a GPU, ``CudaBackend().available()`` is False.

Forward: an online softmax per (row, head) that writes y and lse [N_dst, H] (fp32). Backward:
delta = <dy, y>, then dQ over the rows (CSR) and dK, dV over the columns of the cached transpose
(CSC), each without atomics. Rows and columns are binned by degree (see ``cuda_plan.py``).
bf16 inputs accumulate in fp32; y is produced in fp32 (kept for backward) and cast for the caller.
A score bias [E, H] is read by the forward and both backward passes (the column pass through the
transpose's CSR positions); the dQ pass writes its gradient, ds [E, H], once per edge-head.
Edge values (``edge_values.py``) run around these kernels, unchanged: the kernels keep only lse, so
the probabilities are recomputed in torch, in edge chunks.
Constant scores (q = k = None: GCN's and SAGE's mean, ``mean.py``) have no kernel here: they run
torch's sparse CSR matmul on the device (cuSPARSE SpMM, forward over the CSR, backward over the
cached transpose; fp32 accumulation), the ``FusedBackend`` default, for any head dim.
"""

from __future__ import annotations

import numpy as np
import torch

from dsgraph.ops import cuda_source
from dsgraph.ops.backend import INT32_MAX, FusedBackend, on_one_device
from dsgraph.ops.csc import cached_per_graph, transpose
from dsgraph.ops.cuda_plan import SegmentPlan, build_plan

try:
    import cupy
except Exception:  # not installed, or a build that finds no CUDA library: the backend is off
    cupy = None

THREADS_PER_BLOCK = 256
MAX_GRID_Y = 65535
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}
_FWD, _BWD = "sparse_attention_fwd.cu", "sparse_attention_bwd.cu"
_MODULES: dict[tuple[int, str, str, int, bool], object] = {}


class CudaBackend(FusedBackend):
    """CuPy-launched kernels on CUDA tensors in fp32 or bf16 with a head dim in HEAD_DIMS."""

    name = "cuda"
    priority = 20
    device_type = "cuda"
    supports_bias = True
    supports_edge_values = (
        True  # from lse: the probabilities are recomputed in torch (edge_values.RecomputedEdgeValues)
    )

    def available(self) -> bool:
        if cupy is None or not torch.cuda.is_available():
            return False
        try:
            return cupy.cuda.runtime.getDeviceCount() > 0
        except Exception:
            return False

    def unsupported(self, q, tensors) -> str:
        if q.dtype not in _DTYPE_NAMES:
            return f"dtype {q.dtype} is not supported; use float32 or bfloat16"
        if "q" in tensors and q.shape[2] not in cuda_source.HEAD_DIMS:  # constant scores (no q) run any head dim
            return f"head dim {q.shape[2]} is not supported; use one of {cuda_source.HEAD_DIMS} or backend='reference'"
        if max(q.shape[0], tensors.get("k", q).shape[0]) > INT32_MAX or q.shape[1] > MAX_GRID_Y:
            return f"node counts must stay below 2^31 and heads at most {MAX_GRID_Y}"
        return on_one_device(tensors, self.device_type)

    def forward(self, rowptr, col, q, k, v, scale: float, bias=None):
        y_f32, lse = attention_forward(rowptr, col, q, k, v, scale, bias)
        return y_f32, lse, (lse,)

    def backward(self, rowptr, col, q, k, v, y_f32, saved, dy, scale: float, needs, bias=None):
        return attention_backward(
            rowptr, col, q, k, v, y_f32, saved[0], dy, scale, need_kv=needs[1] or needs[2], bias=bias
        )


def attention_forward(rowptr, col, q, k, v, scale: float, bias=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns y [N_dst, H, D] fp32 and lse [N_dst, H] fp32 (-inf for rows with no edges); ``bias``
    [E, H] (CSR order, q's dtype) is added to the scores."""
    q, k, v = (_aligned(t) for t in (q, k, v))
    heads = q.shape[1]
    y = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    if (
        q.shape[0] == 0 or col.numel() == 0
    ):  # no edges: every row is empty (and DLPack views of empty tensors are avoided)
        return y.zero_(), lse.fill_(float("-inf"))
    plan = _plan(rowptr, col, "rows", rowptr)
    with _on_torch_stream(q.device):  # DLPack views are made for, and kernels run on, torch's stream
        graph = (_dl(rowptr.contiguous()), _dl(_int32(col).contiguous()))
        args = (*graph, _dl(q), _dl(k), _dl(v), _dl(y), _dl(lse), np.int32(heads), np.float32(scale))
        if bias is not None:
            args = (*args, _dl(bias.detach().contiguous()))
        _run_pass(_FWD, "sa_forward", plan, args, q, state_vectors=1, bias=bias is not None)
    return y, lse


def attention_backward(rowptr, col, q, k, v, y_f32, lse, dy, scale: float, *, need_kv: bool = True, bias=None):
    """Returns (dq, dk, dv, dbias) in the inputs' dtype, for the upstream gradient dy [N_dst, H, D];
    without ``need_kv`` the column pass is skipped and dk, dv are None; dbias (ds [E, H] in CSR
    order, written by the dQ pass) is None without a ``bias``."""
    q, k, v, dy, y_f32 = (_aligned(t) for t in (q, k, v, dy.to(q.dtype), y_f32))  # y: 16-byte loads too
    lse = lse.detach().contiguous()  # callers that merge blocks may pass views
    heads = q.shape[1]
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dbias = None if bias is None else torch.empty(bias.shape, dtype=q.dtype, device=q.device)
    if q.shape[0] == 0 or k.shape[0] == 0 or col.numel() == 0:
        return dq.zero_(), dk.zero_() if need_kv else None, dv.zero_() if need_kv else None, dbias
    bias = None if bias is None else bias.detach().contiguous()
    delta = torch.empty_like(lse)
    items = lse.numel()
    team = cuda_source.team_size(_DTYPE_NAMES[q.dtype], q.shape[2])
    row_plan = _plan(rowptr, col, "rows", rowptr)
    with _on_torch_stream(q.device):  # DLPack views are made for, and kernels run on, torch's stream
        delta_args = (_dl(dy), _dl(y_f32), _dl(delta), np.int64(items))
        _kernel(q, _BWD, "sa_delta")((_blocks(items * team),), (THREADS_PER_BLOCK,), delta_args)
        common = (_dl(q), _dl(k), _dl(v), _dl(dy), _dl(lse), _dl(delta))
        graph = (_dl(rowptr.contiguous()), _dl(_int32(col).contiguous()))
        dq_args = (*graph, *common, _dl(dq), np.int32(heads), np.float32(scale))
        if bias is not None:
            dq_args = (*dq_args, _dl(bias), _dl(dbias))
        _run_pass(_BWD, "sa_dq", row_plan, dq_args, q, state_vectors=1, bias=bias is not None)
    if not need_kv:
        return dq, None, None, dbias
    csc = transpose(rowptr, col, k.shape[0])
    col_plan = _plan(rowptr, col, "cols", csc.colptr)
    with _on_torch_stream(q.device):
        dkdv_args = (_dl(csc.colptr), _dl(csc.row), *common, _dl(dk), _dl(dv), np.int32(heads), np.float32(scale))
        if bias is not None:
            dkdv_args = (*dkdv_args, _dl(csc.perm.long()), _dl(bias))  # int64 already on a GPU (csc.py)
        _run_pass(_BWD, "sa_dkdv", col_plan, dkdv_args, q, state_vectors=2, bias=bias is not None)
    return dq, dk, dv, dbias


def _run_pass(
    file: str, prefix: str, plan: SegmentPlan, args: tuple, q: torch.Tensor, *, state_vectors: int, bias: bool = False
) -> None:
    """Launches the schedules of one pass, heaviest bin first; call it inside ``_on_torch_stream``."""
    heads, dim = q.shape[1], q.shape[2]
    team = cuda_source.team_size(_DTYPE_NAMES[q.dtype], dim)
    if plan.long.numel():
        state_floats = 2 + state_vectors * dim  # dsg::state_floats<NF>()
        partial = torch.empty(plan.num_chunks * heads * state_floats, dtype=torch.float32, device=q.device)
        _kernel(q, file, f"{prefix}_chunk", bias)(
            (plan.num_chunks, heads),
            (cuda_source.BLOCK_WARPS * 32,),
            (*args, _dl(plan.chunk_seg), _dl(plan.chunk_begin), np.int32(plan.chunk_edges), _dl(partial)),
        )
        n_long = plan.long.numel()
        _kernel(q, file, f"{prefix}_merge", bias)(
            (_blocks(n_long * heads * team),),
            (THREADS_PER_BLOCK,),
            (*args, _dl(plan.long), _dl(plan.long_chunk_ptr), np.int32(n_long), _dl(partial)),
        )
    if plan.warp.numel():
        n = plan.warp.numel()
        _kernel(q, file, f"{prefix}_warp", bias)(
            (_blocks(n * heads * 32),), (THREADS_PER_BLOCK,), (*args, _dl(plan.warp), np.int32(n))
        )
    if plan.small.numel():
        n = plan.small.numel()
        _kernel(q, file, f"{prefix}_small", bias)(
            (_blocks(n * heads * team),), (THREADS_PER_BLOCK,), (*args, _dl(plan.small), np.int32(n))
        )


def _kernel(q: torch.Tensor, file: str, name: str, bias: bool = False):
    """The compiled kernel ``name`` of cuda/<file> for q's device, dtype and head dim, with or
    without the score bias (cached)."""
    key = (q.device.index, file, _DTYPE_NAMES[q.dtype], q.shape[2], bias)
    module = _MODULES.get(key)
    if module is None:
        with cupy.cuda.Device(q.device.index):
            module = cupy.RawModule(
                code=cuda_source.kernel_source(file),
                options=cuda_source.compile_options(key[2], key[3], bias),
                backend="nvrtc",
            )
            module.compile()
        _MODULES[key] = module
    return module.get_function(name)


def _plan(rowptr, col, direction: str, ptr: torch.Tensor) -> SegmentPlan:
    return cached_per_graph(rowptr, col, ("cuda-plan", direction, ptr.numel()), lambda: build_plan(ptr))


class _on_torch_stream:
    """Context: CuPy's current device and stream are torch's current ones for ``device``.

    Off CUDA (the CPU emulator that tests put in place of ``cupy``) there is no torch stream: the
    stand-in gets None."""

    def __init__(self, device: torch.device):
        self.device = cupy.cuda.Device(device.index)
        self.torch_stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
        self.device_index = device.index

    def __enter__(self):
        self.device.__enter__()
        self.stream = _external_stream(
            self.torch_stream, self.device_index
        )  # inside the device: from_external takes the current one
        self.stream.__enter__()

    def __exit__(self, *exc):
        self.stream.__exit__(*exc)
        self.device.__exit__(*exc)


def _external_stream(torch_stream, device_index):
    """A CuPy view of a torch stream: CuPy 14's ``Stream.from_external`` when the torch stream speaks
    the CUDA stream protocol (``__cuda_stream__``; torch 2.11 has no such attribute, and CuPy 14 then
    raises TypeError), else ``ExternalStream`` on the raw handle (older CuPy, or an older torch).
    Off CUDA (the emulator) ``torch_stream`` is None and the stand-in gets no handle."""
    if (
        torch_stream is not None
        and hasattr(torch_stream, "__cuda_stream__")
        and hasattr(cupy.cuda.Stream, "from_external")
    ):
        return cupy.cuda.Stream.from_external(torch_stream)
    return cupy.cuda.ExternalStream(None if torch_stream is None else torch_stream.cuda_stream, device_index)


def _blocks(threads: int) -> int:
    return max(1, -(-threads // THREADS_PER_BLOCK))


def _dl(t: torch.Tensor):
    """A zero-copy CuPy view of a contiguous tensor; bf16 travels as int16 (CuPy has no bf16).
    Detached first: DLPack refuses to export a tensor that requires grad."""
    t = t.detach()
    return cupy.from_dlpack(t.view(torch.int16) if t.dtype == torch.bfloat16 else t)


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """t.contiguous(), copied once more if its start is not 16-byte aligned (vector loads)."""
    t = t.detach().contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _int32(col: torch.Tensor) -> torch.Tensor:
    return col if col.dtype == torch.int32 else col.to(torch.int32)
