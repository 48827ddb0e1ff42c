"""The AGP cost and memory model: pure functions of a graph's shape, a model's sizes and a profile.

For strategy s on p ranks, one training iteration costs (per rank, the slowest rank sets the pace)::

    T(s, p) = L * (attention(s, p) + comm(s, p)) + rest(p) [+ gradient sync(p)]

Each strategy states its own terms (``Strategy.cost`` in its file: the busiest rank's edge-heads
and rows, its collectives and their bytes per layer, the graph arrays and activations it keeps);
this module is one loop over them:

- attention: the profile's alpha fit at p ranks applied to the edge-heads (scaled by the head-dim
  knee when the model's D differs from the profile's);
- comm: each collective's beta fit at p ranks on its per-rank message, forward plus backward; a
  strategy whose collectives overlap its attention costs the longer of the two;
- rest: the profile's fit for the projections and FFN (node-MACs), over all layers, the input
  projection and the classifier;
- activation checkpointing (``ModelShape.checkpoint_every``): each checkpointed layer runs its
  forward again in backward: FORWARD_SHARE of its attention and projection time and its forward
  collectives once more; it keeps its input and its attention sublayer's output for backward, and
  one sublayer's activations exist at a time during its backward (``checkpoint_nested``: it keeps
  its input alone and runs its attention sublayer's forward and collectives a third time);
- gradient sync (``step=True``): ZeRO's gradient reduction, a reduce-scatter plus an all-gather of
  the fp32 parameters (the same for every strategy, so it only moves the choice of p); it is part of
  ``rest_s`` so that ``comm_s`` is exactly the strategy's own collectives (what CommStats measures).

Memory per rank: fp32 parameters with gradients and two Adam states, the rank's features, the
strategy's graph arrays, activations saved per layer and the largest transient buffer of the
backward. Infeasible pairs carry a reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dsgraph.agp.profile import Profile
from dsgraph.parallel.registry import auto_candidates, get_strategy
from dsgraph.parallel.shapes import GraphShape, ModelShape, SplitShape  # noqa: F401 (re-exported)


def strategy_names() -> list[str]:
    """The strategies AGP predicts: the registry's auto candidates."""
    return auto_candidates()


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


def _infeasible(p: int, graph: GraphShape, profile: Profile) -> str:
    if p not in profile.ranks:
        return f"the profile covers rank counts {sorted(profile.ranks)}, not {p}"
    if p > graph.num_nodes:
        return f"{p} ranks for {graph.num_nodes} nodes"
    return ""


FORWARD_SHARE = 1 / 3  # a layer's forward of its forward-plus-backward time (backward ~ 2x forward)


def attention_sublayer_units(dtype_bytes: int) -> float:
    """Values of hidden width a row keeps for backward in a block's attention sublayer, besides what the
    strategy keeps (``CostTerms.activation_bytes``): the norm's output, q, k, v, the dropped-out v, the
    attention output and W_o's output (7), the fused op's fp32 copy of its output when the
    activations are narrower (4 / b - 1), and two bool dropout masks (2 / b)."""
    return 7 + (4 / dtype_bytes - 1) + 2 / dtype_bytes


def ffn_sublayer_units(ffn_mult: int, dtype_bytes: int) -> float:
    """The same for the FFN sublayer: the norm's output, the hidden layer before and after GELU
    (``ffn_mult`` wide each), the output and the residual sum (4 + 2 f), and a bool dropout mask."""
    return 4 + 2 * ffn_mult + 1 / dtype_bytes


def _memory(kinds, all_terms, model: ModelShape, dtype_bytes: int) -> float:
    """Bytes per rank: optimizer-held parameters, features, the strategy's graph and activations.
    A checkpointed layer keeps its input (a Transformer block also its attention sublayer's output,
    unless nested); during its backward one sublayer is recomputed at a time and holds its activations."""
    b, rows = dtype_bytes, all_terms[0].rows
    block_input = rows * model.hidden * b  # a row of d values per node
    saved, recomputed = 0.0, 0.0
    for kind, terms in zip(kinds, all_terms):
        attention = rows * kind.shape.hidden * b * attention_sublayer_units(b) + terms.activation_bytes
        ffn = block_input * ffn_sublayer_units(model.ffn_mult, b) if kind.ffn else 0.0
        nested = kind.ffn and model.checkpoint_nested
        kept_rows = 2 if kind.ffn and not nested else 1
        saved += (kind.count - kind.checkpointed) * (attention + ffn) + kind.checkpointed * kept_rows * block_input
        if kind.checkpointed:  # nested: the FFN's input is recomputed too
            recomputed = max(recomputed, attention, ffn + block_input if nested else ffn)
    params = 16.0 * model.num_params  # fp32 weights, gradients, two Adam states
    features = rows * model.in_dim * b
    transient = max(terms.transient_bytes for terms in all_terms)
    return params + features + all_terms[0].graph_bytes + saved + recomputed + transient


def _layer_times(kinds, all_terms, fits, profile: Profile, scale: float) -> tuple[float, float, float, float]:
    """Attention and collective seconds of all layers (recomputed forwards included), the share of
    the forward collectives that runs during attention, and the projections' multiply-adds."""
    attention = comm = hidden = macs = 0.0
    for kind, terms in zip(kinds, all_terms):
        d_scale = (fits.head_dim_knee + kind.shape.head_dim) / (fits.head_dim_knee + profile.head_dim)  # cost ~ knee + D
        attention += (kind.count + FORWARD_SHARE * kind.attention_recomputes) * fits.attention(terms.edge_heads * d_scale)
        layer = sum(times * fits.collectives[name](size) for name, size, times in terms.messages)
        forward = sum(times * fits.collectives[name](size) for name, size, times in terms.forward_messages)
        comm += (kind.count * layer + kind.attention_recomputes * forward) * scale
        hidden += kind.count * terms.forward_hidden * forward
        macs += terms.rows * (kind.count + FORWARD_SHARE * kind.checkpointed) * kind.macs_per_node
        macs += terms.rows * FORWARD_SHARE * (kind.attention_recomputes - kind.checkpointed) * kind.attention_macs_per_node
    return attention, comm, hidden, macs


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
    classifier and the gradient sync (a whole training step); without it the result is the
    ``layers`` attention layers alone."""
    spec, kinds = get_strategy(strategy), model.layer_kinds()
    reason = _infeasible(p, graph, profile)
    all_terms = [] if reason else [spec.cost(p, graph, kind.shape, profile.dtype_bytes) for kind in kinds]
    reason = reason or next((t for t in all_terms if isinstance(t, str)), "")
    if reason:
        return Prediction(strategy, p, math.inf, math.inf, math.inf, math.inf, math.nan, math.nan, False, reason)
    fits = profile.fits(p)
    attention, comm, hidden, macs = _layer_times(kinds, all_terms, fits, profile, calibration.comm_scale.get(strategy, 1.0))
    rows = all_terms[0].rows
    if step:  # the input projection and the classifier, where the model has them
        projected = (model.in_dim if model.input_projection else 0) + (model.num_classes if model.head == "linear" else 0)
        macs += rows * model.hidden * projected
    rest = fits.rest(macs)
    if step and p > 1:  # ZeRO's gradient reduction: the same for every strategy, counted with the rest
        grads = 4.0 * model.num_params / p
        rest += fits.collectives["reduce_scatter"](grads) + fits.collectives["all_gather"](grads)
    comm -= min(hidden, FORWARD_SHARE * attention)  # what runs during the forward's attention costs nothing more
    layers = max(attention, comm) if all_terms[0].overlapped else attention + comm
    total = layers + rest + calibration.overhead_s
    memory = _memory(kinds, all_terms, model, profile.dtype_bytes)
    sent = sum(t.bytes_sent * k.count + t.forward_bytes * k.attention_recomputes for k, t in zip(kinds, all_terms))
    cap = profile.memory_capacity_bytes
    per_rank = None if cap is None else cap / p if profile.memory_shared_by_ranks else cap
    if per_rank is not None and memory > per_rank:
        reason = f"memory over capacity: {memory / 2**30:.2f} GiB per rank > {per_rank / 2**30:.2f} GiB"
        return Prediction(strategy, p, total, attention, comm, rest, memory, sent, False, reason)
    return Prediction(strategy, p, total, attention, comm, rest, memory, sent)


def predict_all(
    graph: GraphShape,
    model: ModelShape,
    profile: Profile,
    max_ranks: int,
    *,
    strategies=None,
    step: bool = True,
    calibration: Calibration = Calibration(),
) -> list[Prediction]:
    """Every (strategy, p) for p = 1..max_ranks, in (p, strategy) order."""
    if max_ranks < 1:
        raise ValueError(f"max_ranks must be >= 1, got {max_ranks}")
    names = strategy_names() if strategies is None else strategies
    return [
        predict(s, p, graph, model, profile, step=step, calibration=calibration)
        for p in range(1, max_ranks + 1)
        for s in names
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
    singles = [x for x in (predict(c, 1, graph, model, profile, step=False) for c in strategy_names()) if x.feasible]
    one = min(singles, key=lambda x: x.time_s)  # T_iter(1): the job on one rank
    here = predict(strategy, p, graph, model, profile, step=False)
    there = predict(strategy, s * p, graph, model, profile, step=False)
    if not (here.feasible and there.feasible):
        raise ValueError(f"scaling test {strategy} {p}->{s * p}: {here.reason or there.reason}")
    n = graph.num_nodes
    k = one.time_s / n
    lhs = s * p * (there.comm_s / n - here.comm_s / n) / (s - 1)
    return ScalingTest(strategy, p, s, lhs, k, lhs <= k, there.time_s < here.time_s)
