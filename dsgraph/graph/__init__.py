from dsgraph.graph.datasets import load_dataset
from dsgraph.graph.graph import Graph
from dsgraph.graph.npz import load_npz, save_npz
from dsgraph.graph.rmat import rmat_graph

__all__ = ["Graph", "load_dataset", "load_npz", "save_npz", "rmat_graph"]
