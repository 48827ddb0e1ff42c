"""Process groups and their row split, the collectives strategies use (autograd pairs and async
primitives), the all-reduce of global sums (``GlobalNodes``), compressed exchanges, halo plans and
the control plane."""

from dsgraph.comm.allreduce import GlobalNodes, all_reduce_sum
from dsgraph.comm.alltoall import (
    PendingRows,
    edges_to_heads,
    exchange_rows,
    heads_to_nodes,
    nodes_to_heads,
    start_exchange_rows,
)
from dsgraph.comm.compress import CODECS, get_codec
from dsgraph.comm.gather import gather_constant_rows, gather_rows, gather_rows_padded, padded_index
from dsgraph.comm.group import CommStats, GraphParallelGroup, RowSplit
from dsgraph.comm.ring import start_ring_shift

__all__ = [
    "CODECS",
    "CommStats",
    "GlobalNodes",
    "all_reduce_sum",
    "GraphParallelGroup",
    "RowSplit",
    "gather_rows",
    "gather_constant_rows",
    "gather_rows_padded",
    "padded_index",
    "nodes_to_heads",
    "heads_to_nodes",
    "edges_to_heads",
    "exchange_rows",
    "start_exchange_rows",
    "start_ring_shift",
    "PendingRows",
    "get_codec",
]
