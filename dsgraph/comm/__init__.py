from dsgraph.comm.collectives import (
    PendingRows, exchange_rows, gather_rows, gather_rows_padded, heads_to_nodes, nodes_to_heads, padded_index,
    start_exchange_rows, start_ring_shift,
)
from dsgraph.comm.group import CommStats, GraphParallelGroup, RowSplit

__all__ = [
    "CommStats",
    "GraphParallelGroup",
    "RowSplit",
    "gather_rows",
    "gather_rows_padded",
    "padded_index",
    "nodes_to_heads",
    "heads_to_nodes",
    "exchange_rows",
    "start_exchange_rows",
    "start_ring_shift",
    "PendingRows",
]
