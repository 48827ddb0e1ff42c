from dsgraph.comm.collectives import PendingRows, exchange_rows, gather_rows, heads_to_nodes, nodes_to_heads, start_exchange_rows
from dsgraph.comm.group import CommStats, GraphParallelGroup, even_row_counts, row_starts

__all__ = [
    "CommStats",
    "GraphParallelGroup",
    "even_row_counts",
    "row_starts",
    "gather_rows",
    "nodes_to_heads",
    "heads_to_nodes",
    "exchange_rows",
    "start_exchange_rows",
    "PendingRows",
]
