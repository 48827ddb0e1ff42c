from dsgraph.ops.dispatch import available_backends, register_backend, sparse_attention
from dsgraph.ops.reference import sparse_attention_reference

__all__ = ["sparse_attention", "sparse_attention_reference", "register_backend", "available_backends"]
