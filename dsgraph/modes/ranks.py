"""What the training modes share, beneath their packages (no mode package imports a sibling): a
graph split over the job's ranks by one strategy (``GraphOnRanks``, ``rank_attention``) and the
attention of a graph one rank holds whole (``local_attention``, with the graph's ``edge_features``
as such a mode needs them)."""

from __future__ import annotations

import torch

from dsgraph.comm import GlobalNodes, GraphParallelGroup
from dsgraph.graph import Graph
from dsgraph.graph.encodings import arrays_of
from dsgraph.graph.loading import from_graph, load_rank_graph
from dsgraph.graph.rank_graph import RankGraph
from dsgraph.modes.base import EvalBatch
from dsgraph.parallel import Needs, StrategyContext, get_strategy
from dsgraph.parallel.shapes import ModelShape


def dtype_name(dtype: torch.dtype) -> str:
    return "bfloat16" if dtype == torch.bfloat16 else "float32"


def rank_attention(
    graph,
    pg,
    strategy: str,
    ctx: StrategyContext,
    device="cpu",
    dtype=None,
    partition_method=None,
    seed=0,
    encodings: tuple[str, ...] = (),
):
    """A graph every rank holds in memory, split over ``pg`` for ``strategy`` (``pg``'s own split if
    it has one, else ``partition_method``, else the strategy's default), its rows carrying the
    encoding arrays ``encodings``: returns (pg with the split, this rank's RankGraph on ``device``,
    its attention, with the graph's edge features if it has them). For tools and tests; training
    goes through ``GraphOnRanks``, which runs the same steps."""
    spec = get_strategy(strategy)
    spec.check_feasible(ctx.heads, pg.world_size)
    method = partition_method or spec.split_method
    pg, rank_graph = from_graph(
        graph,
        pg,
        ctx.control_plane(),
        method,
        seed,
        whole=spec.needs is Needs.WHOLE_GRAPH,
        edge_features=graph.edge_attr is not None,
        encodings=encodings,
    )
    spec.prepare(rank_graph, pg, ctx)
    rank_graph = rank_graph.to(device, dtype)
    return pg, rank_graph, spec.build(rank_graph, pg, ctx)


def _spread(values: list[int]) -> str:
    """'min..max (max/mean 1.02)' of the per-rank counts."""
    mean = sum(values) / len(values)
    return f"{min(values):,}..{max(values):,} (max/mean {max(values) / mean if mean else 1.0:.3f})"


def train_count(nodes) -> int:
    """What the loss divides by: training rows, or present (row, label) pairs of a multi-label task
    (its loss sums the BCE of every present pair)."""
    if nodes.y.ndim == 2:
        return int((~torch.isnan(nodes.y[nodes.train_mask])).sum())
    return int(nodes.train_mask.sum())


class GraphOnRanks:
    """A graph split over the job's ranks by one strategy: its rank graph and attention."""

    def __init__(self, cfg, pg, control, log, graph=None, heartbeat=lambda phase: None, outputs: int | None = None):
        """``graph``: the dataset when the caller has loaded it already (isolated mode, link tasks);
        ``outputs``: the model's output width when it is not the graph's class count (a link task's
        embedding width)."""
        self.cfg, self.control, self.log, self.outputs = cfg, control, log, outputs
        self.spec = get_strategy(cfg.strategy)
        self.spec.check_feasible(cfg.heads, pg.world_size)
        self.pg, self.graph = load_rank_graph(
            pg,
            control,
            dataset=cfg.dataset,
            seed=cfg.seed,
            self_loops=cfg.adds_self_loops,
            partitions=cfg.partitions,
            split_method=cfg.parallel.split_method(self.spec),
            whole=self.spec.needs is Needs.WHOLE_GRAPH,
            graph=graph,
            heartbeat=heartbeat,
            choice=cfg.split_choice(),
            encodings=arrays_of(cfg.model.encodings),
            edge_features=cfg.model.reads_edges,
            timeout_s=cfg.timeout_s,
        )
        self.spec.prepare(self.graph, self.pg, self._context("float32"))
        block = self.graph.block
        shares = control.allgather((block.num_rows, block.num_edges, train_count(self.graph.nodes)))
        self.train_count = sum(train for _, _, train in shares)  # counted before the data moves
        if self.train_count == 0:
            raise ValueError(f"dataset '{cfg.dataset}' has no training nodes (train_mask is empty)")
        log(
            f"rows over {self.pg.world_size} rank(s) ({cfg.parallel.split_method(self.spec)} split): "
            f"nodes {_spread([n for n, _, _ in shares])}, in-edges {_spread([e for _, e, _ in shares])}"
        )
        self.attention = None

    def _context(self, dtype: str) -> StrategyContext:
        cfg = self.cfg
        graph = self.graph
        model = ModelShape.of_config(
            cfg, graph.num_features, self.outputs or graph.num_classes, graph.num_edge_features
        )
        return StrategyContext(
            heads=cfg.heads,
            backend=cfg.backend,
            control=self.control,
            dtype=dtype,
            log=self.log,
            model=model,
            parallel=cfg.parallel,
            agp=cfg.agp,
        )

    def attach(self, device: torch.device, dtype: torch.dtype) -> None:
        """The one place this rank's graph, derived plans and node data move to ``device``."""
        self.graph = self.graph.to(device, dtype)
        self.attention = self.spec.build(self.graph, self.pg, self._context(dtype_name(dtype)))

    def eval_batch(self) -> EvalBatch:
        nodes = self.graph.nodes
        return EvalBatch(
            x=nodes.x,
            attention=self.attention,
            node_ids=nodes.node_ids,
            y=nodes.y,
            masks=(nodes.train_mask, nodes.val_mask, nodes.test_mask),
            enc=nodes.enc,
        )


# --- a graph one rank holds whole (sampled batches, isolated subgraphs) ---------------------------
LOCAL_STRATEGY = "ag"  # a graph held whole by one rank: the plain op (every strategy reduces to it on one rank)


def local_attention(graph: RankGraph, backend: str, global_nodes: GlobalNodes | None = None):
    """The attention of a graph held whole by this rank (already on its device). ``global_nodes``:
    what global attention spans (default: this graph's nodes, no collective)."""
    pg = GraphParallelGroup.single(graph.num_nodes)
    attention = get_strategy(LOCAL_STRATEGY).build(graph, pg, StrategyContext(heads=1, backend=backend))
    attention.global_nodes = global_nodes
    return attention


def edge_features(graph: Graph, reads_edges: bool, dataset: str) -> Graph:
    """``graph`` as a mode that holds it whole needs it: its edge features kept when the model reads
    them (a ValueError when it has none), dropped otherwise."""
    if reads_edges and graph.edge_attr is None:
        raise ValueError(
            f"dataset '{dataset}': the model reads edge features (model.edge_features), but the graph has no "
            'edge_attr; use a dataset with edge features, or set model.edge_features to "none"'
        )
    if not reads_edges:
        graph.edge_attr = graph.added_loops = None
    return graph


def check_store_features(cfg, mode: str) -> None:
    """A mode that trains from a partition store reads node features only: refuses encodings and
    edge features there (ValueError naming the settings)."""
    if cfg.partitions is not None and (cfg.model.encodings or cfg.model.reads_edges):
        raise ValueError(
            f"mode '{mode}' from a partition store ('partitions') reads node features only: set model.encodings "
            "to [] and model.edge_features to \"none\", or drop 'partitions' (the dataset is then loaded whole)"
        )
