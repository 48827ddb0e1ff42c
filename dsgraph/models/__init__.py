from dsgraph.models.dropout import NodeDropout
from dsgraph.models.graph_transformer import GraphTransformer
from dsgraph.models.options import GAT, TRANSFORMER, ModelOptions

__all__ = ["GAT", "GraphTransformer", "ModelOptions", "NodeDropout", "TRANSFORMER"]
