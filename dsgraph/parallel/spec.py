"""What makes a graph-parallel strategy a strategy: the spec every strategy file defines.

A strategy splits one attention layer over the ranks of a ``GraphParallelGroup``: it moves q, k, v
(or K/V rows, or head slices) between ranks and calls the local op; it never touches a kernel. Its
``Strategy`` spec declares

- ``needs``: what of the graph each rank must hold (its own rows; the whole structure; its rows of a
  partition with few cut edges), which decides how the graph is loaded and split;
- ``infeasible``: when it cannot run (for example a head count that does not divide over the ranks);
- ``prepare``: structures derived from the rank's graph once, on the CPU, before the graph moves to
  its device (a halo plan); they travel with the graph (``RankGraph.to``);
- ``build``: the attention callable for a rank, from a graph already on its device;
- ``cost``: its terms for AGP's cost and memory model (bytes per layer, work, memory per rank).

Registering the spec (``registry.py``) is all the config, the CLI, the trainer, AGP and the tests need.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from dsgraph.comm.allreduce import GlobalNodes
from dsgraph.comm.control import TorchControlPlane
from dsgraph.parallel.config import ParallelConfig

if TYPE_CHECKING:
    from dsgraph.comm import GraphParallelGroup
    from dsgraph.graph.rank_graph import RankGraph
    from dsgraph.parallel.shapes import GraphShape, ModelShape


class Needs(enum.Enum):
    """What of the graph a rank holds for a strategy."""

    ROWS = "its own rows"
    WHOLE_GRAPH = "the whole graph on every rank"
    PARTITION = "its own rows of a partition with few cut edges"


class GraphAttention(ABC):
    """One rank's attention: ``(q_nHD, k_nHD, v_nHD, bias_eH) -> y_nHD`` on its own rows (n = its
    row count, all H heads); the optional score bias [e, H] has a row per in-edge of the rank's rows
    in the order of its CSR block (``RankGraph.block``), and ``edges`` holds those edges' features
    (``RankGraph.edges``; None when the rank holds none), so a model can make the bias from them.
    The training loop calls the hooks below on whatever strategy it runs; they do nothing unless a
    strategy (such as ``auto``) needs them."""

    name: str = ""
    edges = None
    """The ``EdgeData`` of the rank's in-edges (block order), or None."""
    degrees: torch.Tensor | None = None
    """int64 [n]: the in-degree of the rank's rows (``RankGraph.block``), for GCN's normalisation
    (``dsgraph/models/conv.py``); every strategy sets it."""
    pg: GraphParallelGroup
    """The group its rows are split over (every strategy sets it)."""
    global_nodes: GlobalNodes | None = None
    """The nodes global attention spans from this rank (``global_scope``); None: every row of the
    graph split over ``pg``. A mode narrows it where a step sees part of the graph (sampled mode:
    the global batch's seeds)."""

    def global_scope(self) -> GlobalNodes:
        """What linear global attention (``dsgraph/models/global_attention.py``) sums over: its
        per-head sums of this rank's rows are all-reduced over the scope's group."""
        return self.global_nodes if self.global_nodes is not None else GlobalNodes(self.pg)

    @abstractmethod
    def __call__(
        self,
        q_nHD: torch.Tensor,
        k_nHD: torch.Tensor,
        v_nHD: torch.Tensor,
        bias_eH: torch.Tensor | None = None,
        edge_values: torch.Tensor | None = None,
    ):
        """y_nHD in q's dtype; differentiable in q, k, v and the bias. With ``edge_values`` u [e, C]
        (block order, constants; only where the spec's ``edge_values`` is True) returns (y_nHD,
        z_nHC), z_i = sum_j a_ij u_ij (``dsgraph.ops.edge_values``). q = k = None: constant scores,
        each row's mean of its in-neighbours' v (``dsgraph.ops.mean``; GCN, SAGE), V moved alone."""

    def after_step(self, step_s: float, comm_s: float) -> None:
        """A training step finished (every rank calls this at the same step; may be collective)."""

    def row_fields(self) -> dict:
        """Extra columns for this step's metrics rows."""
        return {}

    def drain_events(self) -> list[dict]:
        """Metrics rows of their own (kind other than step/eval) raised since the last call."""
        return []


@dataclass(frozen=True, slots=True)
class CostTerms:
    """One strategy on p ranks, for AGP: the busiest rank's share of one layer and its memory."""

    edge_heads: float
    """Attention work per layer: (edge, head) pairs the busiest rank computes."""
    rows: int
    """Node rows the busiest rank projects (QKV, output, FFN)."""
    messages: tuple[tuple, ...]
    """Collectives per layer, forward and backward: (profile collective name, bytes per rank, how
    many times; a fraction where one message costs a share of a measured collective), and optionally
    a fourth element: the bytes of it that come from other nodes, where the strategy knows them (the
    halo of a node-then-rank partition; ``agp/tiers.py``)."""
    bytes_sent: float
    """Bytes the busiest rank sends per layer, forward and backward (what CommStats counts)."""
    graph_bytes: float
    """Graph arrays the rank keeps (CSR, the cached CSC, index plans)."""
    activation_bytes: float
    """Attention activations kept for backward per layer."""
    transient_bytes: float
    """The largest short-lived buffer of a layer's backward."""
    kv_replica_bytes: float = 0.0
    """Of ``activation_bytes``: K/V rows of other ranks held for the layer (GP-AG's replica, GP-A2A's
    head slice of all N rows), for the memory report."""
    halo_bytes: float = 0.0
    """Of ``activation_bytes``: halo rows fetched from other ranks (GP-Halo), for the memory report."""
    attention_rows: float = 0.0
    """Rows the busiest rank's attention kernel runs over, where they are not ``rows`` (GP-A2A: all N)."""
    attention_heads: float = 0.0
    """Heads per edge the busiest rank's kernel computes, where not all of the model's (GP-A2A: H / p)."""
    attention_sources: float = 0.0
    """Rows whose K and V one kernel call reads (and whose dK, dV it writes), where they are not the rows
    it runs over: GP-AG's gathered N (padded), GP-Halo's own rows and halo, GP-AG ring's one block."""
    attention_calls: int = 1
    """Kernel calls per layer, each over ``attention_rows`` rows and its share of the edges (GP-AG
    ring: one per block, P)."""
    copied_values: float = 0.0
    """Values the busiest rank's strategy code writes per layer, forward plus backward, besides its
    kernels and collectives: the layouts rows travel in and come back from, concatenations, the
    kernel's contiguous copies of strided views, a ring's merges, a halo's gathers and scatters
    (memory-bound work the profile prices per value, ``RankFits.copy``). Counted for the plain path
    (no score bias, edge values or compression); ``tests/agp/test_copied_values.py`` holds each
    strategy's count against the tensor operations its code runs."""
    overlapped: bool = False
    """True when the collectives run while attention computes (the layer takes the longer of the two)."""
    forward_messages: tuple[tuple[str, float, float], ...] = ()
    """The forward's share of ``messages``: what recomputing the layer (activation checkpointing) runs again."""
    forward_bytes: float = 0.0
    """The forward's share of ``bytes_sent``."""
    forward_hidden: float = 0.0
    """The share of the forward messages' time spent while attention computes (0: none)."""


@dataclass(frozen=True, kw_only=True)
class StrategyContext:
    """What a strategy is built with besides the graph and the process group."""

    heads: int
    backend: str = "auto"
    """The sparse attention backend name every local op call uses."""
    control: Any = None
    """The run's ControlPlane (small objects between ranks); None: torch object collectives."""
    model: ModelShape | None = None
    """The model's shape, for strategies that predict their own cost (auto)."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """The run's ``parallel`` section: how rows and their gradients travel (``codec``,
    ``grad_codec``), head groups (``comm_chunks``), GP-AG's ``regather_kv`` (``config.py``)."""
    agp: Any = None
    """The run's ``agp`` section for strategy auto (``dsgraph.agp.config.AgpConfig``, a layer
    above, so not named here); None: its defaults (no profile: auto falls back to ag)."""
    dtype: str = "float32"
    """The activation dtype of the run ('float32' or 'bfloat16')."""
    log: Callable[[str], None] = print
    """Rank 0's log (other ranks get a no-op)."""

    def control_plane(self):
        if self.control is None:
            return TorchControlPlane()
        return self.control


class Strategy(ABC):
    """The spec of one graph-parallel strategy (see the module docstring)."""

    name: str = ""
    summary: str = ""
    """One line for --help and the docs."""
    needs: Needs = Needs.ROWS
    split_method: str = "balanced"
    """How the loader splits the rows when the config's 'partition_method' does not choose: a
    contiguous split ('balanced': equal in-edges, the attention work; 'contiguous': equal node
    counts) or a partition that relabels nodes ('metis', 'random')."""
    auto_candidate: bool = True
    """Whether ``auto`` may pick it (on the contiguous row split that auto uses)."""
    edge_values: bool = False
    """Whether its attention takes per-edge values (``model.edge_features`` 'bias_value')."""

    def infeasible(self, heads: int, world_size: int) -> str:
        """'' when the strategy can run ``heads`` heads on ``world_size`` ranks, else why not."""
        return ""

    def prepare(self, graph: RankGraph, pg: GraphParallelGroup, ctx: StrategyContext) -> None:
        """Derives what ``build`` needs from the rank's graph (CPU; collective when it exchanges
        anything), into ``graph.derived``. Called once per graph, before ``graph.to(device)``."""

    @abstractmethod
    def build(self, graph: RankGraph, pg: GraphParallelGroup, ctx: StrategyContext) -> GraphAttention:
        """The attention of this rank, reading only tensors of ``graph`` (already on its device)."""

    @abstractmethod
    def cost(self, p: int, shape: GraphShape, model: ModelShape, dtype_bytes: int) -> CostTerms | str:
        """Its cost terms on p ranks, or why it cannot run there (a non-empty string)."""

    def check_feasible(self, heads: int, world_size: int) -> None:
        """ValueError with the reason when ``infeasible``."""
        reason = self.infeasible(heads, world_size)
        if reason:
            raise ValueError(f"strategy {self.name}: {reason}")


def head_groups(heads: int, chunks: int) -> list[slice]:
    """``heads`` split into g equal contiguous groups, g the largest divisor of ``heads`` not above
    ``chunks`` (so every group's exchange has the same size), as slices."""
    g = max(c for c in range(1, max(1, min(chunks, heads)) + 1) if heads % c == 0)
    size = heads // g
    return [slice(i * size, (i + 1) * size) for i in range(g)]
