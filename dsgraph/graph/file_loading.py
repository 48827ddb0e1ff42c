"""A rank's graph read from the dataset file, only its rows (see ``graph/rank_reader.py``).

Without a partition store every rank used to load the whole dataset; here each rank memory-maps the
dataset's .npz and keeps the in-edges and node data of its own rows, plus what its strategy needs:
the whole structure for a strategy that reads every row, the in-degrees for the balanced split, a
permutation for a partition (computed on rank 0 from the structure alone and broadcast). Synthetic
datasets are written to the cache first, by one process per machine in a child process (so its
memory does not count against the rank), while the other ranks wait on its file lock
(``datasets.cached_dataset``), not in a collective.
"""

from __future__ import annotations

import numpy as np

from dsgraph.graph.datasets import cached_dataset
from dsgraph.graph.partition import partition_nodes
from dsgraph.graph.rank_errors import raise_if_any_rank_failed
from dsgraph.graph.rank_graph import RankGraph
from dsgraph.graph.rank_reader import DatasetFile
from dsgraph.graph.rank_wait import from_root, work_timeout
from dsgraph.graph.split import CONTIGUOUS_METHODS, RowSplit, contiguous_split


def dataset_path(spec: str, seed: int, control, heartbeat=lambda phase: None) -> str:
    """The .npz of ``spec``; a synthetic one missing from the cache is generated first by one process
    per machine while the others wait on its file lock, outside any collective (``cached_dataset``;
    ``dsgraph train`` builds it before the process group exists, so here it is normally found)."""
    path, error = None, None
    try:
        path = cached_dataset(spec, seed, heartbeat=heartbeat)
    except (ValueError, FileNotFoundError) as err:
        error = err
    raise_if_any_rank_failed(control, error)
    return path


def from_file(
    data: DatasetFile,
    pg,
    control,
    method: str,
    self_loops: bool,
    seed: int,
    *,
    whole: bool = False,
    edge_features: bool = False,
    encodings: tuple[str, ...] = (),
    timeout_s: float = 300.0,
    heartbeat=lambda phase: None,
) -> tuple[object, RankGraph]:
    """This rank's share of ``data`` split by ``pg``'s split if it has one, else by ``method``
    (``whole``: the whole structure too; ``edge_features``: the block's edge features;
    ``encodings``: the node arrays its rows carry); equal to
    ``loading.from_graph`` on the whole graph (tested). ``timeout_s``: the job's collective timeout,
    which the wait for a partition on rank 0 extends with the graph's size (``rank_wait.py``)."""
    perm = None
    if pg.split is None and method not in CONTIGUOUS_METHODS and pg.world_size > 1:
        perm, split = _partition(data, pg, control, method, self_loops, seed, timeout_s, heartbeat)
        pg = pg.with_split(split)
    elif pg.split is None:
        pg = pg.with_split(
            contiguous_split(
                method if method in CONTIGUOUS_METHODS else "balanced", data.in_degrees(self_loops), pg.world_size
            )
        )
    if pg.num_rows != data.num_nodes:
        raise ValueError(f"row split {pg.counts} does not cover the graph's {data.num_nodes} nodes")
    start, end = pg.rows
    block, edges = data.rows_and_edges(start, end, self_loops, perm, edge_features)
    ids = np.arange(start, end) if perm is None else perm[start:end]
    structure = None
    if whole:
        structure = block if (start, end) == (0, data.num_nodes) else data.rows(0, data.num_nodes, self_loops, perm)
    graph = RankGraph(
        num_nodes=data.num_nodes,
        block=block,
        nodes=data.node_data(ids, node_ids=ids, arrays=encodings),
        num_features=data.num_features,
        num_classes=data.num_classes(),
        whole=structure,
        edges=edges,
    )
    return pg, graph


def _partition(
    data: DatasetFile, pg, control, method: str, self_loops: bool, seed: int, timeout_s: float, heartbeat
) -> tuple[np.ndarray, RowSplit]:
    """Rank 0 partitions the structure while the others wait (``rank_wait.from_root``, a deadline
    scaled with the edges); every rank gets (perm new id -> old id, the split)."""
    parts = from_root(
        control,
        pg.rank == 0,
        lambda: partition_nodes(data.structure(self_loops), pg.world_size, method, seed=seed, metis_balance="edges"),
        what=f"to partition the graph ({data.num_stored_edges:,} edges) with {method}",
        timeout_s=work_timeout(timeout_s, data.num_stored_edges),
        heartbeat=heartbeat,
    )
    perm = np.argsort(parts, kind="stable").astype(np.int64)  # the order relabel() gives
    return perm, RowSplit(tuple(int(c) for c in np.bincount(parts, minlength=pg.world_size)))
