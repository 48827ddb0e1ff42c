"""Sparse attention (SDDMM -> softmax -> SpMM over in-edges): one function, registered backends."""

from dsgraph.ops.blocks import Partial, attention_backward, attention_forward, merge
from dsgraph.ops.cpu import CpuBackend
from dsgraph.ops.cuda import CudaBackend
from dsgraph.ops.dispatch import available_backends, backend_names, get_backend, register_backend, sparse_attention
from dsgraph.ops.reference import ReferenceBackend, sparse_attention_reference

for _backend in (ReferenceBackend(), CpuBackend(), CudaBackend()):  # the registry: one entry per backend
    register_backend(_backend)

__all__ = [
    "sparse_attention",
    "attention_forward",
    "attention_backward",
    "merge",
    "Partial",
    "sparse_attention_reference",
    "register_backend",
    "available_backends",
    "backend_names",
    "get_backend",
]
