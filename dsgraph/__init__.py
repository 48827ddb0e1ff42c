"""dsgraph: full-graph distributed training of Graph Transformers on DeepSpeed."""

__version__ = "0.1.0"
