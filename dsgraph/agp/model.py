"""The AGP cost and memory model: pure functions of a graph's shape, a model's sizes and a profile.

For strategy s on p ranks, one training iteration costs (per rank, the slowest rank sets the pace)::

    T(s, p) = L * (attention(s, p) + comm(s, p)) + rest(p) [+ gradient sync(p)]

- attention: the profile's alpha fit at p ranks applied to the rank's edge-heads: the largest part's
  edges times H for GP-AG and GP-Halo (each rank owns its rows' in-edges), the whole graph's edges
  times H/p for GP-A2A (every rank runs all edges for its H/p heads).
- comm (per layer, forward plus backward, the profile's beta fits at p ranks on the per-rank message):
  GP-AG all-gathers K,V ``[n, 2, H, D]`` and reduce-scatters their gradient; GP-A2A sends q,k,v node
  split -> head split ``[n, 3d]`` and y back ``[n, d]``, and the transposed pair in the backward;
  GP-Halo exchanges the halo rows of K,V ``[halo, 2d]`` and their gradients with uneven all-to-alls.
- rest: the profile's fit for the projections and FFN (node-MACs), over all layers, the input
  projection and the classifier.
- gradient sync (``step=True``): ZeRO's gradient reduction, a reduce-scatter plus an all-gather of
  the fp32 parameters (the same for every strategy, so it only moves the choice of p); it is part of
  ``rest_s`` so that ``comm_s`` is exactly the strategy's own collectives (what CommStats measures).

Memory per rank: fp32 parameters with gradients and two Adam states, the rank's features, the graph
arrays the strategy keeps (CSR plus the cached CSC of the fused backends), activations saved per layer
and the largest transient buffer of the backward. Infeasible pairs carry a reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dsgraph.agp.profile import Profile

STRATEGY_NAMES = ("ag", "a2a", "halo")
INDEX_BYTES, ROWPTR_BYTES = 4, 8


@dataclass(frozen=True, slots=True)
class HaloShape:
    """A partition into p parts for GP-Halo: per part its nodes, in-edges and distinct remote sources."""

    part_nodes: list[int]
    part_edges: list[int]
    halo_sizes: list[int]


@dataclass(slots=True)
class GraphShape:
    """What the model needs to know about a graph."""

    num_nodes: int
    num_edges: int
    contiguous_edges: dict[int, list[int]] = field(default_factory=dict)
    """In-edges per rank of the even contiguous row split used by GP-AG and GP-A2A, per rank count
    (missing: assume E/p each)."""
    halo: dict[int, HaloShape] = field(default_factory=dict)
    """The halo partition per rank count; GP-Halo is infeasible at a p without one."""

    def __post_init__(self) -> None:
        if self.num_nodes < 1 or self.num_edges < 0:
            raise ValueError(f"graph shape: need num_nodes >= 1 and num_edges >= 0, got {self.num_nodes}, {self.num_edges}")

    def max_part_edges(self, p: int) -> float:
        edges = self.contiguous_edges.get(p)
        return float(max(edges)) if edges else self.num_edges / p

    @classmethod
    def from_counts(cls, num_nodes: int, num_edges: int, rank_counts, halo_fraction: float | None = None) -> "GraphShape":
        """A graph known only by its sizes: even edges per rank, and (when ``halo_fraction`` is
        given) an assumed halo of ``halo_fraction * (N - N/p)`` remote rows per rank, for projections
        of graphs that are not at hand."""
        shape = cls(int(num_nodes), int(num_edges))
        if halo_fraction is not None:
            if not 0.0 <= halo_fraction <= 1.0:
                raise ValueError(f"halo fraction must be in [0, 1], got {halo_fraction}")
            for p in rank_counts:
                n = math.ceil(num_nodes / p)
                shape.halo[p] = HaloShape([n] * p, [math.ceil(num_edges / p)] * p, [int(halo_fraction * (num_nodes - n))] * p)
        return shape

    @classmethod
    def from_graph(cls, graph, rank_counts, halo_method: str | None = "metis", seed: int = 0) -> "GraphShape":
        """Measures ``graph`` for every p in ``rank_counts``: the contiguous split's edges, and (when
        ``halo_method`` is given) a partition with that method, relabelled, with its halo sizes."""
        from dsgraph.comm import even_row_counts, row_starts
        from dsgraph.graph.partition import partition_nodes, partition_quality, relabel

        rowptr = graph.rowptr
        shape = cls(graph.num_nodes, graph.num_edges)
        for p in rank_counts:
            if p > graph.num_nodes:
                continue
            starts = row_starts(even_row_counts(graph.num_nodes, p))
            shape.contiguous_edges[p] = [int(rowptr[starts[r + 1]] - rowptr[starts[r]]) for r in range(p)]
            if halo_method is None:
                continue
            if p == 1:
                shape.halo[1] = HaloShape([graph.num_nodes], [graph.num_edges], [0])
                continue
            parts = partition_nodes(graph, p, halo_method, seed=seed)
            relabelled, _, ranges = relabel(graph, parts, p)
            q = partition_quality(relabelled, ranges)
            shape.halo[p] = HaloShape(q.part_nodes, q.part_edges, q.halo_sizes)
        return shape


@dataclass(frozen=True, slots=True)
class ModelShape:
    """Model sizes: L layers of hidden size d with H heads and an FFN of ffn_mult * d."""

    layers: int
    hidden: int
    heads: int
    ffn_mult: int = 2
    in_dim: int = 0
    num_classes: int = 0

    def __post_init__(self) -> None:
        if min(self.layers, self.hidden, self.heads, self.ffn_mult) < 1 or self.hidden % self.heads:
            raise ValueError(f"model shape: need positive sizes and hidden divisible by heads, got {self}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def layer_macs_per_node(self) -> int:
        """Multiply-adds per node of the QKV, output and FFN projections of one layer."""
        return self.hidden * self.hidden * (4 + 2 * self.ffn_mult)

    @property
    def num_params(self) -> int:
        d, f = self.hidden, self.ffn_mult
        per_layer = 4 * d * d + 2 * f * d * d + (3 * d + d + f * d + d) + 4 * d
        return self.layers * per_layer + self.in_dim * d + d + d * self.num_classes + self.num_classes + 2 * d


@dataclass(frozen=True, slots=True)
class Prediction:
    """Predicted per-iteration time and per-rank peak memory of one (strategy, p)."""

    strategy: str
    p: int
    time_s: float
    attention_s: float
    comm_s: float
    rest_s: float
    memory_bytes: float
    comm_bytes: float
    """Bytes each rank sends per iteration through the strategy's collectives."""
    feasible: bool = True
    reason: str = ""

    def as_dict(self) -> dict:
        return {
            "strategy": self.strategy, "p": self.p, "time_s": self.time_s, "attention_s": self.attention_s,
            "comm_s": self.comm_s, "rest_s": self.rest_s, "memory_bytes": self.memory_bytes,
            "comm_bytes": self.comm_bytes, "feasible": self.feasible, "reason": self.reason,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Calibration:
    """Corrections learnt from measured steps: a strategy's collective time is multiplied by
    ``comm_scale[strategy]`` (default 1: only the collectives a run has used are corrected), and
    ``overhead_s`` (work the model does not see, equal for all strategies) is added to each iteration."""

    comm_scale: dict = field(default_factory=dict)
    overhead_s: float = 0.0


def _comm_per_layer(strategy: str, p: int, graph: GraphShape, model: ModelShape, profile: Profile) -> tuple[float, float]:
    """(seconds, bytes sent) per rank for one layer's forward and backward."""
    if p == 1:
        return 0.0, 0.0
    c = profile.fits(p).collectives
    b, d = profile.dtype_bytes, model.hidden
    n = math.ceil(graph.num_nodes / p)
    if strategy == "ag":
        kv = n * 2 * d * b
        return c["all_gather"](kv) + c["reduce_scatter"](kv), 2 * kv * (p - 1)
    if strategy == "a2a":
        qkv, y = n * 3 * d * b, n * d * b
        return 2 * c["all_to_all"](qkv) + 2 * c["all_to_all"](y), 2 * (qkv + y) * (p - 1) / p
    halo = graph.halo[p]
    rows = max(halo.halo_sizes) * 2 * d * b
    return 2 * c["all_to_all_uneven"](rows), 2 * rows


def _memory(strategy: str, p: int, graph: GraphShape, model: ModelShape, profile: Profile) -> float:
    b, d, H, f, L = profile.dtype_bytes, model.hidden, model.heads, model.ffn_mult, model.layers
    N, E = graph.num_nodes, graph.num_edges
    n = math.ceil(N / p)
    e_loc = graph.max_part_edges(p)
    params = 16.0 * model.num_params  # fp32 weights, gradients, two Adam states
    features = n * model.in_dim * b
    rest_act = n * d * b * (10 + 2 * f)
    if strategy == "a2a":
        graph_b = 2 * ((N + 1) * ROWPTR_BYTES + E * INDEX_BYTES)
        attn_act = N * 4 * d / p * b + N * H / p * 4
        transient = 2 * N * 3 * d / p * b
    else:
        remote = N  # GP-AG keeps all K, V rows
        if strategy == "halo":
            halo = graph.halo[p]
            n, e_loc = max(halo.part_nodes), float(max(halo.part_edges))
            remote = n + max(halo.halo_sizes)
        graph_b = (n + 1) * ROWPTR_BYTES + (remote + 1) * ROWPTR_BYTES + 2 * e_loc * INDEX_BYTES
        attn_act = remote * 2 * d * b + n * H * 4
        transient = 2 * remote * 2 * d * b
    return params + features + graph_b + L * (rest_act + attn_act) + transient


def _infeasible(strategy: str, p: int, graph: GraphShape, model: ModelShape, profile: Profile) -> str:
    if p not in profile.ranks:
        return f"the profile covers rank counts {sorted(profile.ranks)}, not {p}"
    if p > graph.num_nodes:
        return f"{p} ranks for {graph.num_nodes} nodes"
    if strategy == "a2a" and model.heads % p:
        return f"H % p != 0: {model.heads} heads do not split over {p} ranks"
    if strategy == "halo" and p not in graph.halo:
        return f"no partition into {p} parts for halo"
    return ""


def predict(
    strategy: str,
    p: int,
    graph: GraphShape,
    model: ModelShape,
    profile: Profile,
    *,
    step: bool = True,
    calibration: Calibration = Calibration(),
) -> Prediction:
    """Time and memory of ``strategy`` on ``p`` ranks. ``step`` adds the input projection, the
    classifier and the gradient sync (a whole training step); without it the result is ``layers``
    transformer blocks alone."""
    if strategy not in STRATEGY_NAMES:
        raise ValueError(f"unknown strategy '{strategy}'; choose from {', '.join(STRATEGY_NAMES)}")
    reason = _infeasible(strategy, p, graph, model, profile)
    if reason:
        return Prediction(strategy, p, math.inf, math.inf, math.inf, math.inf, math.nan, math.nan, False, reason)
    fits = profile.fits(p)
    knee = fits.head_dim_knee  # an (edge, head) costs in proportion to knee + D
    d_scale = (knee + model.head_dim) / (knee + profile.head_dim)
    if strategy == "a2a":
        edge_heads = graph.num_edges * model.heads / p
    elif strategy == "halo":
        edge_heads = max(graph.halo[p].part_edges) * model.heads
    else:
        edge_heads = graph.max_part_edges(p) * model.heads
    attention = model.layers * fits.attention(edge_heads * d_scale)
    comm_layer, bytes_layer = _comm_per_layer(strategy, p, graph, model, profile)
    comm = model.layers * comm_layer * calibration.comm_scale.get(strategy, 1.0)
    n = max(graph.halo[p].part_nodes) if strategy == "halo" else math.ceil(graph.num_nodes / p)
    macs = n * model.layers * model.layer_macs_per_node
    if step:
        macs += n * model.hidden * (model.in_dim + model.num_classes)
    rest = fits.rest(macs)
    if step and p > 1:  # ZeRO's gradient reduction: the same for every strategy, counted with the rest
        grads = 4.0 * model.num_params / p
        rest += fits.collectives["reduce_scatter"](grads) + fits.collectives["all_gather"](grads)
    total = attention + comm + rest + calibration.overhead_s
    memory = _memory(strategy, p, graph, model, profile)
    cap = profile.memory_capacity_bytes
    if cap is not None:
        per_rank = cap / p if profile.memory_shared_by_ranks else cap
        if memory > per_rank:
            return Prediction(
                strategy, p, total, attention, comm, rest, memory, bytes_layer * model.layers, False,
                f"memory over capacity: {memory / 2**30:.2f} GiB per rank > {per_rank / 2**30:.2f} GiB",
            )  # fmt: skip
    return Prediction(strategy, p, total, attention, comm, rest, memory, bytes_layer * model.layers)


def predict_all(
    graph: GraphShape,
    model: ModelShape,
    profile: Profile,
    max_ranks: int,
    *,
    strategies=STRATEGY_NAMES,
    step: bool = True,
    calibration: Calibration = Calibration(),
) -> list[Prediction]:
    """Every (strategy, p) for p = 1..max_ranks, in (p, strategy) order."""
    if max_ranks < 1:
        raise ValueError(f"max_ranks must be >= 1, got {max_ranks}")
    return [
        predict(s, p, graph, model, profile, step=step, calibration=calibration)
        for p in range(1, max_ranks + 1)
        for s in strategies
    ]


@dataclass(frozen=True, slots=True)
class ScalingTest:
    """The reference paper's criterion for going from p to s*p ranks with collective pattern c:
    ``s*p*(beta_c(s*p) - beta_c(p)) / (s-1) <= k`` with k = T_iter(1)/N (single-rank time per node)
    and beta_c(p) the communication time per node at p ranks. It assumes compute scales as 1/p."""

    strategy: str
    p: int
    s: int
    lhs: float
    k: float
    pays_off: bool
    model_pays_off: bool
    """What the full model says: T(s*p) < T(p) (includes alpha(p) and imbalance)."""


def scaling_test(strategy: str, p: int, s: int, graph: GraphShape, model: ModelShape, profile: Profile) -> ScalingTest:
    if s < 2 or p < 1:
        raise ValueError(f"scaling test needs p >= 1 and s >= 2, got p={p}, s={s}")
    one = predict("ag", 1, graph, model, profile, step=False)
    here = predict(strategy, p, graph, model, profile, step=False)
    there = predict(strategy, s * p, graph, model, profile, step=False)
    if not (here.feasible and there.feasible):
        raise ValueError(f"scaling test {strategy} {p}->{s * p}: {here.reason or there.reason}")
    n = graph.num_nodes
    k = one.time_s / n
    lhs = s * p * (there.comm_s / n - here.comm_s / n) / (s - 1)
    return ScalingTest(strategy, p, s, lhs, k, lhs <= k, there.time_s < here.time_s)
