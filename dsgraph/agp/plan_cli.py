"""``dsgraph plan``: the predicted time and memory of every (strategy, p) for a graph, and the pick."""

from __future__ import annotations

import argparse
import json
import sys

from dsgraph.agp.choose import choose
from dsgraph.agp.hierarchy import add_node_splits
from dsgraph.agp.model import GraphShape, ModelShape, Prediction, predict_all, scaling_test, strategy_names
from dsgraph.agp.placements import predict_variants
from dsgraph.agp.profile import load_profile
from dsgraph.agp.report import (
    memory_lines,
    next_smaller,
    projected_inputs,
    remedies,
    shape_advice,
    smaller_lines,
    time_lines,
)
from dsgraph.comm.compress import CODECS
from dsgraph.graph.partition import METHODS
from dsgraph.models.options import BLOCKS, GLOBAL_ATTENTIONS, HEADS, ModelOptions
from dsgraph.parallel.config import ParallelConfig


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dsgraph plan",
        description=f"Predict per-iteration time and per-rank memory of the strategies {', '.join(strategy_names())} "
        "on 1..WORLD_SIZE ranks from an AGP profile (see `dsgraph profile`), reject infeasible pairs with the reason, "
        "and pick one. With --config CONFIG instead: a training run's predicted peak memory per rank "
        "(`dsgraph plan --config CONFIG --help`).",
    )
    p.add_argument("--profile", required=True, help="AGP profile JSON written by `dsgraph profile`")
    p.add_argument(
        "--world-size",
        type=int,
        required=True,
        help="largest rank count to consider (beyond one node: a multiple of the ranks per node)",
    )
    p.add_argument(
        "--ranks-per-node",
        type=int,
        help="ranks (GPUs) per node, for a profile with a 'hierarchy' (default: the profile's; docs/agp/plans.md)",
    )
    _add_graph_arguments(p.add_argument_group("graph (a dataset, or sizes only)"))
    model = p.add_argument_group("model")
    _add_model_arguments(model)
    _add_memory_and_comm_arguments(model)
    p.add_argument("--backend", help="check that the profile was measured with this attention backend")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], help="check that the profile was measured in this dtype")
    p.add_argument("--json", dest="json_out", help="also write the table and the pick to this JSON file")
    return p


def _add_graph_arguments(g: argparse._ArgumentGroup) -> None:
    """The graph: a dataset, or its node and edge counts and the halo they are assumed to have."""
    g.add_argument("--dataset", help="cora | rmat:SCALE[:EDGE_FACTOR] | PATH.npz")
    g.add_argument("--nodes", type=float, help="node count N (with --edges, instead of --dataset)")
    g.add_argument("--edges", type=float, help="edge count E")
    g.add_argument(
        "--halo-fraction",
        type=float,
        help="with --nodes/--edges: assumed halo per rank as a fraction of the remote nodes",
    )
    g.add_argument(
        "--cross-node-share",
        type=float,
        help="with --nodes/--edges on several nodes: the share of a rank's halo that lives on other nodes (default: "
        "(P - g) / (P - 1), the halo spread evenly over the other ranks; an upper bound for a node-then-rank "
        "partition)",
    )
    g.add_argument(
        "--node-halo-fraction",
        type=float,
        help="with --nodes/--edges on several nodes: a node's halo as a fraction of the graph nodes on other nodes, "
        "for the a2a|halo placement (default: the union of its ranks' cross-node halos, read independently)",
    )
    g.add_argument(
        "--partition-method",
        "--halo-method",
        dest="partition_method",
        default="metis",
        choices=[*METHODS, "none"],
        help="partitioner for the strategies that need a partition (default metis; none: no partition)",
    )
    g.add_argument(
        "--self-loops",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="add self loops as training does (default on)",
    )


def _add_model_arguments(m: argparse._ArgumentGroup) -> None:
    """The model's shape, as the training config's model section has it."""
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--hidden", type=int, default=128)
    m.add_argument("--heads", type=int, default=8)
    m.add_argument("--ffn-mult", type=int, default=2)
    m.add_argument("--in-dim", type=int, help="input feature width (default: the dataset's, else hidden)")
    m.add_argument("--classes", type=int, default=0, help="output classes (default: the dataset's)")
    default = ModelOptions()  # the training config's model section, by default
    m.add_argument(
        "--block",
        choices=BLOCKS,
        default=default.block,
        help=f"the hidden layers: attention (GAT-shaped), transformer (an FFN too), gcn, sage; default {default.block}",
    )
    m.add_argument(
        "--head",
        choices=HEADS,
        default=default.head,
        help=f"attention (the last layer attends with class logits, needs --classes) or linear; default {default.head}",
    )
    m.add_argument(
        "--input-projection",
        action=argparse.BooleanOptionalAction,
        default=default.input_projection,
        help="a Linear(in_dim, hidden) before the first block (default: as the training config's model section)",
    )
    m.add_argument(
        "--global-attention",
        choices=GLOBAL_ATTENTIONS,
        default=default.global_attention,
        help="linear: every hidden block adds linear global attention (one all-reduce of its per-head sums "
        f"forward and one backward); default {default.global_attention}",
    )


def _add_memory_and_comm_arguments(m: argparse._ArgumentGroup) -> None:
    """Activation checkpointing and how rows and gradients travel."""
    m.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        metavar="K",
        help="activation checkpointing of blocks 0, K, 2K, ... (1: every block; default 0: none)",
    )
    m.add_argument(
        "--checkpoint-nested",
        action="store_true",
        help="with --checkpoint-every: a block keeps only its input and recomputes its attention twice",
    )
    m.add_argument("--comm-dtype", choices=CODECS, default="none", help="how activation rows travel (default none)")
    m.add_argument(
        "--comm-grad-dtype", choices=CODECS, default="none", help="how their gradients travel (default none)"
    )
    m.add_argument("--comm-chunks", type=int, default=1, help="head groups exchanged one after another (default 1)")
    m.add_argument(
        "--regather-kv", action="store_true", help="ag: gather K and V again in backward instead of keeping them"
    )


def format_table(predictions: list[Prediction], nodes: bool = False) -> str:
    """One line per prediction; ``nodes``: with the node count and the MiB per rank across nodes."""
    extra = f" {'nodes':>5} {'x-node MiB':>10}" if nodes else ""
    head = (
        f"{'p':>3} {'strategy':<8} {'time ms':>10} {'attn ms':>9} {'comm ms':>9} {'rest ms':>9} {'mem MiB':>10}"
        f"{extra}  status"
    )
    lines = [head, "-" * len(head)]
    for x in predictions:
        more = (
            f" {x.nodes:>5} {x.inter_node_bytes / 2**20:10.1f}"
            if nodes and x.feasible
            else f" {x.nodes:>5} {'':>10}"
            if nodes
            else ""
        )
        if x.feasible:
            lines.append(
                f"{x.p:>3} {x.strategy:<8} {x.time_s * 1e3:10.2f} {x.attention_s * 1e3:9.2f} {x.comm_s * 1e3:9.2f} "
                f"{x.rest_s * 1e3:9.2f} {x.memory_bytes / 2**20:10.1f}{more}  ok"
            )
        else:
            mem = f"{x.memory_bytes / 2**20:10.1f}" if x.memory_bytes == x.memory_bytes else f"{'-':>10}"
            time = f"{x.time_s * 1e3:10.2f}" if x.time_s != float("inf") else f"{'-':>10}"
            lines.append(f"{x.p:>3} {x.strategy:<8} {time} {'':>9} {'':>9} {'':>9} {mem}{more}  infeasible: {x.reason}")
    return "\n".join(lines)


def scaling_lines(graph: GraphShape, model: ModelShape, profile, world_size: int) -> list[str]:
    """The paper's test s*p*(beta(s*p) - beta(p))/(s-1) <= k for p -> 2p within the world size."""
    lines = []
    p = 1
    while 2 * p <= world_size and profile.covers(2 * p):
        for s in strategy_names():
            try:
                t = scaling_test(s, p, 2, graph, model, profile)
            except ValueError:
                continue
            verdict = "pays off" if t.pays_off else "does not pay off"
            lines.append(
                f"{s:<5} {p} -> {2 * p} ranks: {t.lhs * 1e9:9.2f} ns <= k = {t.k * 1e9:9.2f} ns? {verdict} "
                f"(full model: {'faster' if t.model_pays_off else 'slower'})"
            )
        p *= 2
    return lines


def _graph_and_sizes(args, profile) -> tuple[GraphShape, int, int, list[str], object]:
    """The graph's shape at every rank count the profile covers, its feature width and classes, one
    note per node-then-rank split, and the loaded graph (None for sizes only)."""
    ranks = profile.rank_counts(args.world_size)
    g = profile.hierarchy.ranks_per_node if profile.hierarchy is not None else None
    method = None if args.partition_method == "none" else args.partition_method
    if args.dataset:
        from dsgraph.graph import load_dataset

        graph = load_dataset(args.dataset)
        if args.self_loops:
            graph = graph.with_self_loops()
        shape = GraphShape.from_graph(graph, ranks, partition_method=None)  # the row splits at every p
        flat = GraphShape.from_graph(graph, [p for p in ranks if g is None or p <= g], partition_method=method)
        shape.partitions.update(flat.partitions)  # flat partitions within a node; node-then-rank ones beyond
        notes = add_node_splits(shape, ranks, g, graph=graph, method=method) if g and method else []
        return shape, graph.num_features, graph.num_classes, notes, graph
    if args.nodes is None or args.edges is None:
        raise ValueError("give --dataset, or both --nodes and --edges")
    shape = GraphShape.from_counts(args.nodes, args.edges, ranks, args.halo_fraction)
    notes = (
        add_node_splits(
            shape,
            ranks,
            g,
            halo_fraction=args.halo_fraction,
            node_halo_fraction=args.node_halo_fraction,
            cross_node_share=args.cross_node_share,
        )
        if g
        else []
    )
    return shape, 0, 0, notes, None


def _profile(args):
    profile = load_profile(args.profile)
    profile.check_matches(args.backend, args.dtype)
    if args.ranks_per_node is not None:
        if args.ranks_per_node < 1:
            raise ValueError(f"--ranks-per-node must be >= 1, got {args.ranks_per_node}")
        profile = profile.with_ranks_per_node(args.ranks_per_node)
    if not profile.covers(args.world_size):
        if profile.hierarchy is None:
            raise ValueError(
                f"{args.profile}: the profile covers rank counts up to {profile.max_ranks}, not world size "
                f"{args.world_size}; run `dsgraph profile --max-ranks {args.world_size}` (or plan for fewer ranks), "
                "or give the profile a 'hierarchy' (nodes and an inter-node tier; docs/agp/plans.md) "
                "to plan several nodes"
            )
        g = profile.hierarchy.ranks_per_node
        raise ValueError(
            f"{args.profile}: world size {args.world_size} is not 1..{g} or whole nodes of {g} ranks; "
            f"plan for a multiple of {g} (or set --ranks-per-node)"
        )
    return profile


def _model(args, in_dim: int, classes: int, **changes) -> ModelShape:
    parallel = ParallelConfig(
        comm_dtype=args.comm_dtype,
        comm_grad_dtype=args.comm_grad_dtype,
        comm_chunks=args.comm_chunks,
        regather_kv=args.regather_kv,
    )
    return ModelShape(
        layers=args.layers,
        hidden=args.hidden,
        heads=args.heads,
        ffn_mult=args.ffn_mult,
        in_dim=args.in_dim if args.in_dim is not None else (in_dim or args.hidden),
        num_classes=args.classes or classes,
        checkpoint_every=args.checkpoint_every,
        checkpoint_nested=args.checkpoint_nested,
        parallel=parallel,
        block=args.block,
        head=args.head,
        input_projection=args.input_projection,
        global_attention=args.global_attention,
    )


def _section(title: str, lines: list[str]) -> None:
    if lines:
        print(f"\n{title}")
        for line in lines:
            print("  " + line)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.world_size < 1:
            raise ValueError(f"--world-size must be >= 1, got {args.world_size}")
        profile = _profile(args)
        graph, in_dim, classes, notes, loaded = _graph_and_sizes(args, profile)
        if args.head == "attention" and not (args.classes or classes):
            raise ValueError("--head attention needs the class count: give --classes or --dataset")
        model = _model(args, in_dim, classes)
        ranks = profile.rank_counts(args.world_size)
        predictions = predict_all(graph, model, profile, args.world_size, rank_counts=ranks)
        variants = predict_variants(graph, model, profile, ranks)
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph plan: error: {err}", file=sys.stderr)
        return 2
    _print_tables(args, graph, model, profile, ranks, predictions, variants)
    cap = profile.memory_capacity_bytes
    try:
        choice = choose(predictions)
        at_world = choose(predictions, world_size=args.world_size)
    except ValueError as err:
        _next_smaller(args, profile, graph, model, predictions, args.world_size + 1, cap, loaded, in_dim, classes)
        print(f"\ndsgraph plan: error: {err}", file=sys.stderr)
        return 2
    _print_choice(choice, args.world_size, None if profile.hierarchy is None else ranks)
    pick = at_world.best
    _print_pick(args, pick, variants)
    inputs = projected_inputs(profile, notes, args.halo_fraction if not args.dataset else None)
    _section(
        "inputs that are not measured on this system:"
        if any(not i.startswith("[measured]") for i in inputs)
        else "inputs:",
        inputs,
    )
    smaller = _next_smaller(args, profile, graph, model, predictions, args.world_size, cap, loaded, in_dim, classes)
    scaling = scaling_lines(graph, model, profile, args.world_size)
    if scaling:
        print("\nscaling test (reference paper; beta per node, k = T(1)/N):")
        for line in scaling:
            print("  " + line)
    if args.json_out:
        report = {
            "table": [x.as_dict() for x in predictions],
            "pick": choice.best.as_dict(),
            "pick_at_world_size": pick.as_dict(),
            "reasons": choice.reasons,
            "variants": [x.as_dict() for x in variants],
            "inputs": inputs,
            "next_smaller": smaller,
            "model_shape_note": shape_advice(model),
        }
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


def _print_choice(choice, world_size: int, ranks: list[int] | None) -> None:
    """The choice's reasons over p = 1..world_size (or the rank counts of whole nodes); more than 12
    rejected pairs below the world size are counted, not listed."""
    print("\nchoice over p = %s:" % (f"1..{world_size}" if ranks is None else ", ".join(map(str, ranks))))
    rejected = [x for x in choice.rejected if x.p != world_size]
    for line in choice.reasons:
        if (
            not any(line == f"rejected {x.strategy} on {x.p} ranks: {x.reason}" for x in rejected)
            or len(rejected) <= 12
        ):
            print("  " + line)
    if len(rejected) > 12:
        print(f"  ({len(rejected)} pairs below {world_size} ranks rejected: see the table)")


def _print_tables(args, graph, model, profile, ranks, predictions, variants) -> None:
    """The inputs in one line, the prediction table, the placement variants and the shape advice."""
    h = profile.hierarchy
    print(
        f"graph: N={graph.num_nodes:,} E={graph.num_edges:,}; model: L={model.layers} d={model.hidden} H={model.heads} "
        f"({model.block} blocks, {model.head} head{', input projection' if model.input_projection else ''}"
        f"{', linear global attention' if model.global_attention != 'none' else ''}); "
        f"profile: {profile.backend} {profile.dtype} ({profile.system.get('description', 'no description')})"
    )
    if h is not None:
        print(f"system: nodes of {h.ranks_per_node} ranks; rank counts {', '.join(map(str, ranks))}")
    print(format_table(predictions, nodes=h is not None and args.world_size > h.ranks_per_node))
    if variants:
        print("\nplacement-aware variants (costed on paper; no strategy runs them yet, docs/agp/plans.md):")
        print(format_table(variants, nodes=True))
    _section("note on the model shape:", shape_advice(model))


def _print_pick(args, pick, variants) -> None:
    """The pick at the world size, a cheaper placement on paper if any, its memory and time by term."""
    print(
        f"\nat world size {args.world_size}: {pick.strategy} ({pick.time_s * 1e3:.2f} ms, "
        f"{pick.memory_bytes / 2**30:.2f} GiB per rank"
        f"{f', {pick.nodes} nodes' if pick.nodes > 1 else ''})"
    )
    better = [v for v in variants if v.p == args.world_size and v.feasible and v.time_s < pick.time_s]
    if better:
        v = min(better, key=lambda x: x.time_s)
        print(
            f"  on paper, the placement {v.strategy} would take {v.time_s * 1e3:.2f} ms "
            f"({(v.time_s / pick.time_s - 1) * 100:+.0f}%)"
        )
    _section(f"memory per rank of {pick.strategy}@{pick.p}:", memory_lines(pick))
    _section(f"step time of {pick.strategy}@{pick.p}:", time_lines(pick))


def _next_smaller(args, profile, graph, model, predictions, world, cap, loaded, in_dim, classes) -> list[str]:
    """Prints (and returns) what the largest rank count below ``world`` needs to fit."""
    p, smallest = next_smaller(predictions, world)
    if p is None:
        lines = [f"everything fits down to p = {smallest}"] if smallest else []
        _section("the next-smaller configuration:", lines)
        return lines
    at_p = [x for x in predictions if x.p == p]

    def repredict(shape: ModelShape, halo_fraction):
        g = graph
        if halo_fraction != args.halo_fraction and loaded is None:
            g = GraphShape.from_counts(args.nodes, args.edges, [p], halo_fraction)
            if profile.hierarchy is not None:
                add_node_splits(
                    g,
                    [p],
                    profile.hierarchy.ranks_per_node,
                    halo_fraction=halo_fraction,
                    node_halo_fraction=args.node_halo_fraction,
                    cross_node_share=args.cross_node_share,
                )
        return predict_all(g, shape, profile, p, rank_counts=[p])

    fixes = remedies(p, model, repredict, args.halo_fraction if loaded is None else None, cap)
    lines = smaller_lines(p, at_p, fixes, cap, smallest)
    _section(
        f"the next-smaller configuration (p={p}{f', {profile.nodes(p)} nodes' if profile.nodes(p) > 1 else ''}):", lines
    )
    return lines


if __name__ == "__main__":
    sys.exit(main())
