from dsgraph.ops.dispatch import available_backends, register_backend, sparse_attention
from dsgraph.ops.reference import sparse_attention_reference
from dsgraph.ops import cpu as _cpu
from dsgraph.ops import cuda as _cuda

register_backend("cpu", _cpu.is_available, _cpu.sparse_attention_cpu)
register_backend("cuda", _cuda.is_available, _cuda.sparse_attention_cuda)

__all__ = ["sparse_attention", "sparse_attention_reference", "register_backend", "available_backends"]
