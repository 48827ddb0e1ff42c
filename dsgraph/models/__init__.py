from dsgraph.models.dropout import NodeDropout
from dsgraph.models.graph_transformer import GraphTransformer
from dsgraph.models.options import TRANSFORMER, ModelOptions

__all__ = ["GraphTransformer", "ModelOptions", "NodeDropout", "TRANSFORMER"]
