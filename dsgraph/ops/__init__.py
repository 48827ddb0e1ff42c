from dsgraph.ops.dispatch import available_backends, register_backend, sparse_attention
from dsgraph.ops.reference import sparse_attention_reference
from dsgraph.ops import cpu as _cpu

register_backend("cpu", _cpu.is_available, _cpu.sparse_attention_cpu)

__all__ = ["sparse_attention", "sparse_attention_reference", "register_backend", "available_backends"]
