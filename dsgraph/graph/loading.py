"""Where a rank's graph comes from: the whole dataset (optionally relabelled by an in-memory
partition), or its own part of a partition store (``--partitions DIR``).

Either way the result is the process group with the run's row split and a ``RankGraph`` on the
CPU: this rank's CSR block (global source ids of the relabelled graph), the whole structure when
the strategy needs it, the rank's node data and, with ``edge_features``, the features of its
block's in-edges (a dataset without them is then an error). Node ids handed to the model are the dataset's
original ids, so dropout masks do not depend on the partition or on the number of ranks.

``pg`` is the job's ``dsgraph.comm.GraphParallelGroup`` and ``control`` its control plane
(``dsgraph.comm.control``); the loaders use only their rank, size, split and object collectives,
so this module needs nothing from the layers above the graph.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from dsgraph.graph.edges import destination_order
from dsgraph.graph.encodings import as_tensors, missing_error, stored_arrays
from dsgraph.graph.file_loading import dataset_path, from_file
from dsgraph.graph.graph import Graph
from dsgraph.graph.label_checks import SplitChoice
from dsgraph.graph.partition import partition_nodes, relabel
from dsgraph.graph.rank_errors import raise_if_any_rank_failed
from dsgraph.graph.rank_graph import Csr, EdgeData, NodeData, RankGraph
from dsgraph.graph.rank_reader import DatasetFile
from dsgraph.graph.rank_wait import from_root, work_timeout
from dsgraph.graph.split import CONTIGUOUS_METHODS, RowSplit, contiguous_split
from dsgraph.graph.store import load_part, load_permutation


def block_with_self_loops(rowptr: np.ndarray, col: np.ndarray, start: int, edges: EdgeData | None = None):
    """Adds a self loop to every row of the block (rows are global ids start..start+n-1) that has
    none; each row's sources end up sorted, as ``Graph.with_self_loops`` leaves them. Returns
    (rowptr, col, edges): ``edges`` (the block's edge features, or None) in the new order, the
    added loops with zero rows, marked."""
    n = rowptr.size - 1
    dst = np.repeat(np.arange(start, start + n, dtype=np.int64), np.diff(rowptr))
    src = np.asarray(col, dtype=np.int64)
    stored = src.size
    has_loop = np.zeros(n, dtype=bool)
    has_loop[dst[src == dst] - start] = True
    missing = np.flatnonzero(~has_loop) + start
    dst, src = np.concatenate([dst, missing]), np.concatenate([src, missing])
    order = destination_order(dst - start, src, int(src.max(initial=-1)) + 1)
    new_rowptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst - start, minlength=n), out=new_rowptr[1:])
    csr = (torch.from_numpy(new_rowptr), torch.from_numpy(src[order].astype(np.int32)))
    if edges is None:
        return (*csr, None)
    moved = torch.from_numpy(order)
    attr = torch.cat([edges.attr, edges.attr.new_zeros(src.size - stored, edges.num_features)])[moved]
    added = torch.cat([edges.added_loop, torch.ones(src.size - stored, dtype=torch.bool)])[moved]
    return (*csr, EdgeData(attr=attr, added_loop=added))


def load_rank_graph(
    pg,
    control,
    *,
    dataset: str,
    seed: int,
    self_loops: bool,
    split_method: str,
    whole: bool,
    partitions: str | None = None,
    graph: Graph | None = None,
    heartbeat=lambda phase: None,
    choice: SplitChoice = SplitChoice(),
    edge_features: bool = False,
    encodings: tuple[str, ...] = (),
    timeout_s: float = 300.0,
):
    """(``pg`` with the run's row split, this rank's RankGraph): from the partition store
    ``partitions``, from ``graph`` (the dataset, self loops added as configured, when the caller
    holds it already), or else only this rank's rows read from the ``dataset`` file
    (``file_loading.py``). ``split_method`` splits the rows when ``pg`` has no split yet;
    ``whole``: the rank also holds the whole structure (a strategy that reads every row);
    ``choice``: which of the file's fixed splits, and whether they may overlap; ``edge_features``:
    the rank also holds its block's edge features; ``encodings``: the node encoding arrays the
    rank's node data carries (``encodings/``); a dataset without one of them fails here, on every
    rank, with the ``dsgraph encode`` command that computes it; ``timeout_s``: the job's collective
    timeout, which a wait for rank 0's partition extends with the graph's size (``rank_wait.py``)."""
    if partitions is not None:
        if whole:
            raise ValueError(
                "'partitions' loads one part per rank, but this strategy needs the whole graph on every rank"
            )
        return from_store(partitions, pg, control, self_loops, encodings, edge_features=edge_features)
    options = {
        "whole": whole,
        "edge_features": edge_features,
        "encodings": encodings,
        "timeout_s": timeout_s,
        "heartbeat": heartbeat,
    }
    if graph is not None:
        return from_graph(graph, pg, control, split_method, seed, **options)
    path = dataset_path(dataset, seed, control, heartbeat)  # collective: every rank has the file after it
    error, data = None, None
    try:
        data = DatasetFile(path, choice=choice)
        if edge_features:
            data.require_edge_features()
        missing = [name for name in encodings if name in stored_arrays() and name not in data.stored]
        if missing:
            raise missing_error(dataset, path, missing, seed)
    except (ValueError, FileNotFoundError) as err:
        error = err
    raise_if_any_rank_failed(control, error)
    return from_file(data, pg, control, split_method, self_loops, seed, **options)


def from_store(
    store_dir: str, pg, control, self_loops: bool, encodings: tuple[str, ...] = (), *, edge_features: bool = False
) -> tuple[object, RankGraph]:
    """Memory-maps only this rank's part of the store (checked against META.json's sizes and sha256)
    with its ``encodings`` arrays (and its edge features, with ``edge_features``); the store must
    have exactly one part per rank."""
    error = None
    try:
        part = load_part(store_dir, pg.rank, pg.world_size, encodings=encodings)
        perm = load_permutation(store_dir)
        if edge_features and part.edge_attr is None:
            raise ValueError(
                f"{store_dir}: the model reads edge features (model.edge_features), but the partition store has none; "
                'write it from a dataset with edge_attr, or set model.edge_features to "none"'
            )
    except (ValueError, FileNotFoundError) as err:
        error = err
    raise_if_any_rank_failed(control, error)
    meta = part.meta
    pg = pg.with_split(RowSplit(tuple(int(end) - int(start) for start, end in meta["node_ranges"])))
    rowptr, col = np.asarray(part.rowptr), np.asarray(part.col)
    copy = lambda a: torch.from_numpy(np.array(a))  # noqa: E731 (writable tensors from read-only maps)
    edges = EdgeData(attr=copy(part.edge_attr), added_loop=copy(part.added_loops)) if edge_features else None
    if self_loops:
        rowptr_t, col_t, edges = block_with_self_loops(rowptr, col, part.start, edges)
        block = Csr(rowptr_t, col_t)
    else:
        block = Csr(torch.from_numpy(rowptr.copy()), torch.from_numpy(col.copy()))
    nodes = NodeData(
        node_ids=copy(perm[part.start : part.end]).long(),
        x=copy(part.x).float(),
        y=copy(part.y),
        train_mask=copy(part.train_mask),
        val_mask=copy(part.val_mask),
        test_mask=copy(part.test_mask),
        enc=as_tensors(part.enc),
    )
    num_classes = meta.get("num_classes")
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"{os.path.join(store_dir, 'META.json')}: needs a positive integer 'num_classes'")
    graph = RankGraph(
        num_nodes=part.num_nodes,
        block=block,
        nodes=nodes,
        num_features=int(meta["num_features"]),
        num_classes=num_classes,
        edges=edges,
    )
    return pg, graph


def from_graph(
    graph: Graph,
    pg,
    control,
    method: str | None,
    seed: int,
    *,
    whole: bool = False,
    edge_features: bool = False,
    encodings: tuple[str, ...] = (),
    timeout_s: float = 300.0,
    heartbeat=lambda phase: None,
) -> tuple[object, RankGraph]:
    """This rank's share of a graph every rank holds, split by ``pg``'s split if it has one (the
    caller chose it), else by ``method`` (None: 'balanced'), with the ``encodings`` arrays of
    ``graph.enc``. A contiguous method ('balanced', 'contiguous') keeps the node order; a partition
    ('metis', 'random') is computed on rank 0, its part ids reach the others through the control
    plane, and every rank relabels the graph so that each part is one contiguous row range.
    ``edge_features``: with the block's edge features; ``timeout_s``: the job's collective timeout,
    extended with the graph's size for the wait on rank 0's partition (``rank_wait.py``)."""
    if edge_features and graph.edge_attr is None:
        raise ValueError(
            f"dataset '{graph.name}': the model reads edge features (model.edge_features), but the graph has no "
            'edge_attr; use a dataset with edge features, or set model.edge_features to "none"'
        )
    missing = [name for name in encodings if name not in graph.enc]
    if missing:
        raise missing_error(graph.name, f"graph '{graph.name}'", missing)
    num_classes = graph.num_classes
    graph, perm, pg = _split_rows(graph, pg, control, method or "balanced", seed, timeout_s, heartbeat)
    if pg.num_rows != graph.num_nodes:
        raise ValueError(f"row split {pg.counts} does not cover the graph's {graph.num_nodes} nodes")
    start, end = pg.rows
    structure = Csr(graph.rowptr, graph.col)
    block = structure if (start, end) == (0, graph.num_nodes) else Csr(*graph.rows(start, end))
    node_ids = torch.arange(start, end) if perm is None else torch.from_numpy(perm[start:end])
    nodes = NodeData(
        node_ids=node_ids,
        x=graph.x[start:end],
        y=graph.y[start:end],
        train_mask=graph.train_mask[start:end],
        val_mask=graph.val_mask[start:end],
        test_mask=graph.test_mask[start:end],
        enc={name: graph.enc[name][start:end] for name in encodings},
    )
    edges = None
    if edge_features:
        lo, hi = graph.edge_range(start, end)
        edges = EdgeData.of(graph.edge_attr[lo:hi], None if graph.added_loops is None else graph.added_loops[lo:hi])
    rank_graph = RankGraph(
        num_nodes=graph.num_nodes,
        block=block,
        nodes=nodes,
        num_features=graph.num_features,
        num_classes=num_classes,
        whole=structure if whole else None,
        edges=edges,
    )
    return pg, rank_graph


def _split_rows(graph: Graph, pg, control, method: str, seed: int, timeout_s: float, heartbeat):
    """(graph, perm, pg): ``pg`` with its row split (its own if it has one); a partition method
    relabels the graph (``perm``: dataset id of each new row), a contiguous one keeps it (perm None)."""
    if pg.split is None and method not in CONTIGUOUS_METHODS and pg.world_size > 1:
        parts = from_root(
            control,
            pg.rank == 0,
            lambda: partition_nodes(graph, pg.world_size, method, seed=seed, metis_balance="edges"),
            what=f"to partition the graph ({graph.num_edges:,} edges) with {method}",
            timeout_s=work_timeout(timeout_s, graph.num_edges),
            heartbeat=heartbeat,
        )
        graph, perm, ranges = relabel(graph, parts, pg.world_size)
        return graph, perm, pg.with_split(RowSplit.from_starts([*ranges[:, 0], ranges[-1, 1]]))
    if pg.split is None:
        method = method if method in CONTIGUOUS_METHODS else "balanced"
        pg = pg.with_split(contiguous_split(method, graph.in_degrees(), pg.world_size))
    return graph, None, pg
