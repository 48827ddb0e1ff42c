from dsgraph.models.dropout import NodeDropout
from dsgraph.models.graph_transformer import GraphTransformer

__all__ = ["GraphTransformer", "NodeDropout"]
