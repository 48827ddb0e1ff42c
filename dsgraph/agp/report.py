"""What ``dsgraph plan`` says about its pick besides the table: memory and time by term, the
projected inputs it rests on, what would make the next-smaller configuration fit, and advice on the
model shape. Pure functions of predictions and a way to predict again (no printing)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from dsgraph.agp.model import MEMORY_TERMS, TIME_TERMS, ModelShape, Prediction

GIB = 2**30


def memory_lines(x: Prediction) -> list[str]:
    """Per-rank memory of one prediction by term, largest first, with its share."""
    total = x.memory_bytes
    terms = sorted(((k, x.memory_terms.get(k, 0.0)) for k in MEMORY_TERMS), key=lambda kv: -kv[1])
    return [f"{name:<18} {v / GIB:9.2f} GiB  {100 * v / total:5.1f}%" for name, v in terms if v > 0] + [
        f"{'total':<18} {total / GIB:9.2f} GiB"
    ]


def time_lines(x: Prediction) -> list[str]:
    """Predicted step time of one prediction by term (the terms sum to the total)."""
    lines = [
        f"{name:<22} {x.time_terms.get(name, 0.0) * 1e3:10.2f} ms"
        for name in TIME_TERMS
        if abs(x.time_terms.get(name, 0.0)) > 1e-9
    ]
    lines.append(f"{'total':<22} {x.time_s * 1e3:10.2f} ms")
    if x.nodes > 1:
        lines.append(f"across nodes: {x.inter_node_bytes / 2**20:,.1f} MiB per rank and step over the inter-node links")
    return lines


def projected_inputs(profile, notes: list[str], halo_fraction: float | None) -> list[str]:
    """Every input of the plan that is not measured on the machine, with where it came from."""
    lines = []
    h = profile.hierarchy
    if h is not None:
        for tier in (h.compute, h.intra, h.inter):
            if tier is not None:
                lines.append(f"[{tier.status}] {tier.name}: {tier.source}")
    else:
        source = profile.system.get("source", "")
        status = "projected" if "projected" in (source + profile.system.get("description", "")) else "measured"
        lines.append(
            f"[{status}] {profile.system.get('description', profile.source)}" + (f": {source}" if source else "")
        )
    if halo_fraction is not None:
        lines.append(
            f"[assumed] halo per rank: {halo_fraction:g} of the remote nodes (--halo-fraction; the graph is not loaded)"
        )
    lines += [f"[{'estimated' if 'estimate' in n else 'measured'}] cross-node halo {n}" for n in notes]
    return lines


@dataclasses.dataclass(frozen=True, slots=True)
class Remedy:
    """A change that would make a configuration fit, and the plan it gives there."""

    change: str
    best: Prediction


def next_smaller(predictions: list[Prediction], world_size: int) -> tuple[int | None, int | None]:
    """(the largest rank count below ``world_size`` at which nothing fits, the smallest one at or above
    it where something does): the configuration one step smaller than the smallest that fits."""
    counts = sorted({x.p for x in predictions if x.p < world_size})
    fits = {x.p for x in predictions if x.feasible}
    smallest = None
    for p in reversed(counts):
        if p not in fits:
            return p, smallest
        smallest = p
    return None, smallest


def remedies(
    p: int,
    model: ModelShape,
    repredict: Callable[[ModelShape, float | None], list[Prediction]],
    halo_fraction: float | None,
    capacity: float | None,
) -> list[Remedy]:
    """Single changes that make something fit at p ranks: checkpointing, nested checkpointing, the
    linear head, a smaller halo (when it is an assumption). ``repredict(model, halo_fraction)``
    returns the feasible-or-not predictions at p."""
    out = []
    candidates = []
    if not model.checkpoint_every:
        candidates.append(("--checkpoint-every 1", dataclasses.replace(model, checkpoint_every=1)))
    if model.checkpoint_every and not model.checkpoint_nested and model.block == "transformer":
        candidates.append(("--checkpoint-nested", dataclasses.replace(model, checkpoint_nested=True)))
    if model.head == "attention":
        candidates.append(("--head linear", dataclasses.replace(model, head="linear")))
    for change, shape in candidates:
        fit = [x for x in repredict(shape, halo_fraction) if x.feasible]
        if fit:
            out.append(Remedy(change, min(fit, key=lambda x: x.time_s)))
    if halo_fraction:  # the largest halo fraction (of the assumed one, in steps of 1/16) that fits
        for k in range(15, 0, -1):
            f = halo_fraction * k / 16
            fit = [x for x in repredict(model, f) if x.feasible]
            if fit:
                out.append(
                    Remedy(
                        f"a halo of {f:.4g} of the remote nodes (a better partition) instead of {halo_fraction:g}",
                        min(fit, key=lambda x: x.time_s),
                    )
                )
                break
    return out


def smaller_lines(
    p: int, at_p: list[Prediction], fixes: list[Remedy], capacity: float | None, smallest: int | None = None
) -> list[str]:
    """What the configuration ``p`` (the next smaller than the smallest that fits, ``smallest``) needs."""
    lines = [f"the smallest rank count that fits as given is {smallest}"] if smallest is not None else []
    sized = [x for x in at_p if x.memory_bytes == x.memory_bytes]
    if sized:
        low = min(sized, key=lambda x: x.memory_bytes)
        over = low.memory_bytes - (capacity or 0.0)
        big = sorted(low.memory_terms.items(), key=lambda kv: -kv[1])[:3]
        lines.append(
            f"p={p} does not fit: the smallest is {low.strategy} at {low.memory_bytes / GIB:.1f} GiB per rank"
            + (f", {over / GIB:.1f} GiB over the {capacity / GIB:.1f} GiB" if capacity else "")
            + "; largest terms: "
            + ", ".join(f"{k} {v / GIB:.1f} GiB" for k, v in big)
        )
    for fix in fixes:
        b = fix.best
        lines.append(
            f"  with {fix.change}: {b.strategy}@{p} fits at {b.memory_bytes / GIB:.1f} GiB per rank, "
            f"{b.time_s * 1e3:.0f} ms per step"
        )
    if sized and not fixes:
        lines.append("  no single change of checkpointing, head or halo makes it fit; it needs more memory per rank")
    return lines


def shape_advice(model: ModelShape) -> list[str]:
    """A warning when the default attention head is much wider than the hidden layers (many classes)."""
    if model.head != "attention":
        return []
    from dsgraph.models.blocks import padded_head_dim

    width = model.heads * padded_head_dim(model.num_classes)
    if width <= 2 * model.hidden:
        return []
    return [
        f"the output layer is an attention head (--head attention, GAT's output layer): it attends with H x pad(C) = "
        f"{model.heads} x {padded_head_dim(model.num_classes)} = {width:,} values per node, "
        f"{width / model.hidden:.1f}x the hidden "
        "width, and its activations and K/V dominate memory. For graphs with many classes use --head linear (a "
        "per-node "
        "classifier); the Transformer shape of docs/agp/plans.md is --block transformer --head linear "
        "--input-projection "
        f'(in a config: "model": {{"block": "transformer", "head": "linear", "input_projection": true}}).'
    ]
