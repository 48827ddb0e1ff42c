"""The AGP cost and memory model: pure functions of a graph's shape, a model's sizes and a profile.

For strategy s on p ranks, one training iteration costs (per rank, the slowest rank sets the pace)::

    T(s, p) = L * (attention(s, p) + copies(s, p) + comm(s, p)) + rest(p) [+ gradient sync(p)]

Each strategy states its own terms (``Strategy.cost`` in its file: the busiest rank's edge-heads
and rows, its collectives and their bytes per layer, the graph arrays and activations it keeps);
this module is one loop over them:

- attention: the profile's alpha fit at p ranks applied to each kernel call's edges, edge-heads,
  row-heads and source row-heads (``AttentionFit``: K/V reads slow down once the call's source rows
  outgrow the cache), scaled by the head-dim knee when the model's D differs from the profile's (the
  knee is the ratio of whole calls at 2D and D); an old profile's log-log line reads the edge-heads
  alone, scaled by the knee;
- copies: the values the strategy's own code writes around its kernels (``CostTerms.copied_values``:
  layouts rows travel in, concatenations, contiguous copies, a ring's merges, a halo's gathers and
  scatters) at the profile's copy fit (none in profiles without one);
- comm: each collective's beta fit at p ranks on its per-rank message, forward plus backward; a
  strategy whose collectives overlap its attention (and copies) costs the longer of the two;
- rest: the profile's fit for everything of a layer but the attention kernels (``RestFit``: the
  projections' and FFN's node-MACs, the element-wise work's node-values n d and a fixed cost per
  layer; an old profile's log-log line reads the MACs alone), over all layers, plus the input
  projection's and the classifier's MACs;
- global attention (``ModelShape.global_attention``): each hidden layer's all-reduce of its per-head
  sums, forward and backward (``GlobalAttentionCost``, the same for every strategy, never
  overlapped), its projections with the rest, its activations with the layer's;
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

from dsgraph.agp.fits import attention_seconds, rest_seconds
from dsgraph.agp.profile import Profile
from dsgraph.parallel.registry import auto_candidates, get_strategy
from dsgraph.parallel.shapes import GlobalAttentionCost, GraphShape, ModelShape, SplitShape  # noqa: F401 (re-exported)


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
    memory_terms: dict = field(default_factory=dict)
    """``memory_bytes`` by term (``MEMORY_TERMS``; they sum to it)."""
    time_terms: dict = field(default_factory=dict)
    """``time_s`` by term (``TIME_TERMS``; they sum to it)."""
    inter_node_bytes: float = 0.0
    """Of the strategy's traffic, the bytes per rank and iteration that cross the inter-node tier."""
    nodes: int = 1
    """Nodes the p ranks span (1 on a single-tier profile)."""

    def as_dict(self) -> dict:
        return {
            "strategy": self.strategy,
            "p": self.p,
            "time_s": self.time_s,
            "attention_s": self.attention_s,
            "comm_s": self.comm_s,
            "rest_s": self.rest_s,
            "memory_bytes": self.memory_bytes,
            "comm_bytes": self.comm_bytes,
            "feasible": self.feasible,
            "reason": self.reason,
            "memory_terms": dict(self.memory_terms),
            "time_terms": dict(self.time_terms),
            "inter_node_bytes": self.inter_node_bytes,
            "nodes": self.nodes,
        }


MEMORY_TERMS = (
    "optimizer states",
    "features",
    "graph",
    "K/V replicas",
    "halo",
    "activations",
    "checkpoints",
    "backward buffer",
)
"""Per-rank memory by term: fp32 parameters with gradients and two Adam states; the rank's input
features; the strategy's graph arrays (CSR, cached CSC, plans); K/V rows of other ranks held for
attention (GP-AG's N x 2d replica, GP-A2A's head slice of all N rows); halo rows (GP-Halo); the other
activations kept for backward (and a checkpointed layer's recomputed sublayer); what checkpointing
keeps per checkpointed block; the largest short-lived buffer of the backward."""
TIME_TERMS = (
    "attention",
    "attention recompute",
    "copies",
    "collectives",
    "collectives recompute",
    "overlap",
    "projections",
    "gradient sync",
    "overhead",
)
"""Per-iteration time by term: the attention kernels (forward + backward) and the forwards that
checkpointing runs again; the strategy's own tensor work around them (``CostTerms.copied_values`` at
the profile's copy rate, recomputed forwards included); the strategy's collectives and their
recomputed forwards; what overlap of collectives with attention saves (<= 0); the projections, FFN,
input projection and classifier; ZeRO's gradient reduction; a calibrated overhead."""


@dataclass(frozen=True, slots=True)
class Calibration:
    """Corrections learnt from measured steps: a strategy's collective time is multiplied by
    ``comm_scale[strategy]`` (default 1: only the collectives a run has used are corrected), and
    ``overhead_s`` (work the model does not see, equal for all strategies) is added to each iteration."""

    comm_scale: dict = field(default_factory=dict)
    overhead_s: float = 0.0


def _infeasible(p: int, graph: GraphShape, profile: Profile) -> str:
    if not profile.covers(p):
        nodes = f" and whole nodes of {profile.hierarchy.ranks_per_node}" if profile.hierarchy else ""
        return f"the profile covers rank counts {sorted(profile.ranks)}{nodes}, not {p}"
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


def global_sublayer_units(dtype_bytes: int) -> float:
    """Values of hidden width a row keeps for backward in a block's global branch
    (``models/global_attention.py``): its q, k, v (3), the dropped-out v and the attention output (2),
    and two bool dropout masks (2 / b). Its fp32 terms are recomputed in backward over row chunks
    (a few MB)."""
    return 5 + 2 / dtype_bytes


SELECTIVE_BLOCKS = ("transformer", "attention")  # the hidden blocks that recompute selectively (not GCN, SAGE)


def selective_blocks(kind) -> int:
    """Blocks of a layer kind that recompute selectively: the hidden Transformer and GAT-shaped blocks
    not checkpointed whole, when the model does (``models/checkpointing.recompute_selectively``)."""
    selective = kind.shape.selective and kind.shape.block in SELECTIVE_BLOCKS  # the output layer's shape says False
    return kind.count - kind.checkpointed if selective else 0


def selective_units(dtype_bytes: int, global_attention: bool, ego: bool = False, output_copy: bool = True) -> float:
    """Values of hidden width a row keeps per block under selective recomputation, besides what the
    strategy keeps: the block's input, q, k, v and the attention's output (5), its fp32 copy where
    the op keeps one and the activations are narrower (``output_copy``: 4 / b), the global branch's
    output (1) and the ego projection (1) where the block has them."""
    return 5 + (4 / dtype_bytes if output_copy and dtype_bytes < 4 else 0) + global_attention + ego


def selective_recompute_units(ffn_mult: int, dtype_bytes: int, global_attention: bool, ffn: bool = True) -> float:
    """Values of hidden width a row holds while backward recomputes the larger region of a block
    (selective recomputation): the post-attention region (W_o's output, its dropout and the residual
    sum: 3, then a Transformer block's FFN sublayer, ``ffn_sublayer_units``), or the pre-attention one
    (the norm's output, q, k, v again, and the global branch's q, k, v, output and dropout: 4 + 5 + 1 / b)."""
    post = 3 + (ffn_sublayer_units(ffn_mult, dtype_bytes) if ffn else 0)
    pre = 4 + (5 + 1 / dtype_bytes if global_attention else 0)
    return max(post, pre)


def memory_terms(kinds, all_terms, model: ModelShape, dtype_bytes: int, output_copy: bool = True) -> dict:
    """Bytes per rank by term (``MEMORY_TERMS``): optimizer-held parameters, features, the strategy's
    graph and activations. A checkpointed layer keeps its input (a Transformer block also its attention
    sublayer's output, unless nested); during its backward one sublayer is recomputed at a time and
    holds its activations. ``output_copy``: the fused op keeps its output in fp32 besides the output
    (the CUDA kernels); False where backward reads the output itself (the CPU kernels,
    ``FusedBackend.delta_from_output``)."""
    b, rows = dtype_bytes, all_terms[0].rows
    copy = 0.0 if output_copy else 4 / b - 1  # attention_sublayer_units' share of the output's fp32 copy
    block_input = rows * model.hidden * b  # a row of d values per node
    saved = checkpoints = kv = halo = 0.0
    recomputed = (0.0, 0.0, 0.0)  # the largest recomputed sublayer: (bytes, of which K/V replicas, of which halo)
    selective_buffer = 0.0
    for kind, terms in zip(kinds, all_terms):
        width = rows * kind.shape.hidden * b
        attention = width * (attention_sublayer_units(b) - copy) + terms.activation_bytes
        attention += width * global_sublayer_units(b) if kind.global_attention else 0.0
        ffn = block_input * ffn_sublayer_units(model.ffn_mult, b) if kind.ffn else 0.0
        if selective_blocks(kind):
            units = selective_units(b, kind.global_attention, output_copy=output_copy)
            attention, ffn = width * units + terms.activation_bytes, 0.0
            units = selective_recompute_units(model.ffn_mult, b, kind.global_attention, kind.ffn)
            selective_buffer = max(selective_buffer, width * units)
        nested = kind.ffn and model.checkpoint_nested
        kept_rows = 2 if kind.ffn and not nested else 1
        plain = kind.count - kind.checkpointed
        saved += plain * (attention + ffn)
        kv, halo = kv + plain * terms.kv_replica_bytes, halo + plain * terms.halo_bytes
        checkpoints += kind.checkpointed * kept_rows * block_input
        if kind.checkpointed:  # nested: the FFN's input is recomputed too
            for candidate in (
                (attention, terms.kv_replica_bytes, terms.halo_bytes),
                (ffn + block_input if nested else ffn, 0.0, 0.0),
            ):
                recomputed = max(recomputed, candidate, key=lambda c: c[0])
    kv, halo = kv + recomputed[1], halo + recomputed[2]
    return {
        "optimizer states": 16.0 * model.num_params,  # fp32 weights, gradients, two Adam states
        "features": rows * model.in_dim * b,
        "graph": all_terms[0].graph_bytes,
        "K/V replicas": kv,
        "halo": halo,
        "activations": saved + recomputed[0] - kv - halo,
        "checkpoints": checkpoints,
        "backward buffer": max(
            max(terms.transient_bytes for terms in all_terms),
            selective_buffer,
        ),
    }


def _message_s(fits, message) -> float:
    """Seconds of one (name, bytes per rank, times[, bytes of it across nodes]) message."""
    name, size, times = message[:3]
    fit = fits.collectives[name]
    if len(message) > 3 and hasattr(fit, "split"):  # a tiered collective whose cross-node share is known
        return times * fit.split(size, message[3])
    return times * fit(size)


def _message_inter_bytes(fits, message) -> float:
    """Bytes per rank of one message that cross the inter-node tier (0 within one node)."""
    fit = fits.collectives[message[0]]
    if not hasattr(fit, "inter_bytes"):
        return 0.0
    return message[2] * fit.inter_bytes(message[1], message[3] if len(message) > 3 else None)


def _attention_call_s(fit, terms, model_heads: int, d_scale: float) -> float:
    """Seconds of one layer's kernel calls on the busiest rank: ``attention_calls`` calls, each over
    ``attention_rows`` rows (default: the rank's rows) and ``attention_sources`` source rows (default:
    the same rows) at ``attention_heads`` heads (default: the model's), sharing the edges."""
    heads = terms.attention_heads or model_heads
    rows = terms.attention_rows or terms.rows
    sources = terms.attention_sources or rows
    edges = terms.edge_heads / heads
    return attention_seconds(
        fit, edges, terms.edge_heads, rows * heads, d_scale, sources * heads, calls=terms.attention_calls
    )


def _layer_times(kinds, all_terms, fits, profile: Profile, scale: float, p: int) -> dict:
    """Attention and collective seconds of all layers, each split into the layers' own and the
    forwards checkpointing recomputes; the global attention's all-reduces (``glob``, never
    overlapped); the share of the forward collectives that runs during attention (``hidden``); the
    projections' multiply-adds, the node-values of their element-wise work and the layers they run
    (a recomputed forward counts FORWARD_SHARE of a layer); the bytes across nodes and the bytes sent."""
    keys = (
        "attention",
        "attention_recompute",
        "copies",
        "comm",
        "comm_recompute",
        "glob",
        "glob_recompute",
        "hidden",
        "macs",
        "values",
        "layers",
        "inter",
        "sent",
    )
    out = dict.fromkeys(keys, 0.0)
    for kind, terms in zip(kinds, all_terms):
        out["sent"] += terms.bytes_sent * kind.count + terms.forward_bytes * kind.attention_recomputes
        if kind.global_attention:
            g = GlobalAttentionCost.of(p, kind.shape)
            again = kind.attention_recomputes + selective_blocks(kind)  # forwards of the branch backward adds
            out["glob"] += kind.count * sum(_message_s(fits, m) for m in g.messages) * scale
            out["glob_recompute"] += again * sum(_message_s(fits, m) for m in g.forward_messages) * scale
            out["sent"] += g.bytes_sent * kind.count + g.forward_bytes * again
            out["inter"] += kind.count * sum(_message_inter_bytes(fits, m) for m in g.messages)
            out["inter"] += again * sum(_message_inter_bytes(fits, m) for m in g.forward_messages)
        d_scale = (fits.head_dim_knee + kind.shape.head_dim) / (
            fits.head_dim_knee + profile.head_dim
        )  # cost ~ knee + D
        one = _attention_call_s(fits.attention, terms, kind.shape.heads, d_scale)
        out["attention"] += kind.count * one
        out["attention_recompute"] += FORWARD_SHARE * kind.attention_recomputes * one
        copies = fits.copy(terms.copied_values) if fits.copy is not None else 0.0  # 0 for no values
        out["copies"] += (kind.count + FORWARD_SHARE * kind.attention_recomputes) * copies
        layer = sum(_message_s(fits, m) for m in terms.messages)
        forward = sum(_message_s(fits, m) for m in terms.forward_messages)
        out["comm"] += kind.count * layer * scale
        out["comm_recompute"] += kind.attention_recomputes * forward * scale
        out["hidden"] += kind.count * terms.forward_hidden * forward
        out["inter"] += kind.count * sum(_message_inter_bytes(fits, m) for m in terms.messages)
        out["inter"] += kind.attention_recomputes * sum(_message_inter_bytes(fits, m) for m in terms.forward_messages)
        out["macs"] += terms.rows * (kind.count + FORWARD_SHARE * kind.checkpointed) * kind.macs_per_node
        out["macs"] += (
            terms.rows * FORWARD_SHARE * (kind.attention_recomputes - kind.checkpointed) * kind.attention_macs_per_node
        )
        runs = kind.count + FORWARD_SHARE * kind.attention_recomputes  # a nested recompute: its attention sublayer
        out["values"] += terms.rows * runs * kind.shape.hidden
        out["layers"] += runs
    return out


def _dense_and_sync_s(model: ModelShape, fits, rows: int, t: dict, p: int, step: bool) -> tuple[float, float]:
    """(projections, rest): the time of the layers' rest (``t``'s macs, values and layers; with
    ``step``, the MACs of the input projection and the classifier too, where the model has them),
    and that plus ZeRO's gradient sync."""
    macs = t["macs"]
    if step:  # the input projection and the classifier, where the model has them
        projected = (model.in_dim if model.input_projection else 0) + (
            model.num_classes if model.head == "linear" else 0
        )
        macs += rows * model.hidden * projected
    projections = rest = rest_seconds(fits.rest, macs, t["values"], t["layers"])
    if step and p > 1:  # ZeRO's gradient reduction: the same for every strategy, counted with the rest
        grads = 4.0 * model.num_params / p
        rest += fits.collectives["reduce_scatter"](grads) + fits.collectives["all_gather"](grads)
    return projections, rest


def predict(
    strategy: str,
    p: int,
    graph: GraphShape,
    model: ModelShape,
    profile: Profile,
    *,
    step: bool = True,
    calibration: Calibration = Calibration(),
    spec=None,
) -> Prediction:
    """Time and memory of ``strategy`` on ``p`` ranks. ``step`` adds the input projection, the
    classifier and the gradient sync (a whole training step); without it the result is the
    ``layers`` attention layers alone. ``spec``: an object with the strategies' ``cost`` method to
    predict instead of the registered strategy of that name (the placement variants, ``placements.py``)."""
    spec, kinds = spec or get_strategy(strategy), model.layer_kinds()
    reason = _infeasible(p, graph, profile)
    all_terms = [] if reason else [spec.cost(p, graph, kind.shape, profile.dtype_bytes) for kind in kinds]
    reason = reason or next((t for t in all_terms if isinstance(t, str)), "")
    nodes = profile.nodes(p)
    if reason:
        return Prediction(
            strategy, p, math.inf, math.inf, math.inf, math.inf, math.nan, math.nan, False, reason, nodes=nodes
        )
    fits = profile.fits(p)
    t = _layer_times(kinds, all_terms, fits, profile, calibration.comm_scale.get(strategy, 1.0), p)
    attention, comm = t["attention"] + t["attention_recompute"], t["comm"] + t["comm_recompute"]
    projections, rest = _dense_and_sync_s(model, fits, all_terms[0].rows, t, p, step)
    hidden = min(t["hidden"], FORWARD_SHARE * attention)  # what runs during the forward's attention costs nothing more
    comm -= hidden
    glob = t["glob"] + t["glob_recompute"]
    compute = attention + t["copies"]  # a ring's merges run between its kernels, while blocks travel
    layers = (max(compute, comm) if all_terms[0].overlapped else compute + comm) + glob
    comm += glob
    total = layers + rest + calibration.overhead_s
    time_terms = {
        "attention": t["attention"],
        "attention recompute": t["attention_recompute"],
        "copies": t["copies"],
        "collectives": t["comm"] + t["glob"],
        "collectives recompute": t["comm_recompute"] + t["glob_recompute"],
        "overlap": layers - compute - comm - hidden,
        "projections": projections,
        "gradient sync": rest - projections,
        "overhead": calibration.overhead_s,
    }
    terms = memory_terms(kinds, all_terms, model, profile.dtype_bytes, output_copy=profile.backend != "cpu")
    memory = sum(terms.values())
    sent = t["sent"]
    extra = dict(memory_terms=terms, time_terms=time_terms, inter_node_bytes=t["inter"], nodes=nodes)
    cap = profile.memory_capacity_bytes
    per_rank = None if cap is None else cap / p if profile.memory_shared_by_ranks else cap
    if per_rank is not None and memory > per_rank:
        reason = f"memory over capacity: {memory / 2**30:.2f} GiB per rank > {per_rank / 2**30:.2f} GiB"
        return Prediction(strategy, p, total, attention, comm, rest, memory, sent, False, reason, **extra)
    return Prediction(strategy, p, total, attention, comm, rest, memory, sent, **extra)


def predict_all(
    graph: GraphShape,
    model: ModelShape,
    profile: Profile,
    max_ranks: int,
    *,
    strategies=None,
    step: bool = True,
    calibration: Calibration = Calibration(),
    rank_counts=None,
) -> list[Prediction]:
    """Every (strategy, p) for p = 1..max_ranks (or the given ``rank_counts``), in (p, strategy) order."""
    if max_ranks < 1:
        raise ValueError(f"max_ranks must be >= 1, got {max_ranks}")
    names = strategy_names() if strategies is None else strategies
    return [
        predict(s, p, graph, model, profile, step=step, calibration=calibration)
        for p in (range(1, max_ranks + 1) if rank_counts is None else rank_counts)
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
