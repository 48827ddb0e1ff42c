"""The conformance suite every registered strategy gets (generated from the registry): on 2 and 4
gloo processes, with uneven row splits and rows that have no in-edges, the model's every block
output, its logits and every parameter gradient equal the single-process run (fp32, dropout on), and
the bytes each rank sends per layer are exactly what the strategy declares to AGP; without and with
edge features (every layer's score bias made from them, which GP-A2A moves with its heads; and,
where the strategy takes them, edge-conditioned values)."""

import dataclasses
import functools
import itertools

import pytest
import torch
import torch.nn.functional as F

from dsgraph.comm import GraphParallelGroup, RowSplit
from dsgraph.graph.partition import partition_quality
from dsgraph.models import GraphTransformer
from dsgraph.models.checkpointing import checkpoint_blocks
from dsgraph.models.options import GAT
from dsgraph.modes.ranks import rank_attention
from dsgraph.parallel import ParallelConfig, StrategyContext, get_strategy, strategy_names
from dsgraph.parallel.shapes import GraphShape, ModelShape, SplitShape
from dsgraph.train.config import DEFAULT_STRATEGY
from tests.distributed import run
from tests.graphs import random_graph

HEADS, HIDDEN, LAYERS = 4, 32, 2
SPLITS = {2: (40, 63), 4: (10, 31, 20, 42)}  # random_graph has 103 nodes: uneven on purpose
MODEL = ModelShape(layers=LAYERS, hidden=HIDDEN, heads=HEADS)  # auto without a profile: its fallback


def forward_backward(
    graph,
    pg,
    strategy,
    control=None,
    checkpointed=False,
    comm=("none", "none"),
    chunks=1,
    backend="reference",
    regather=False,
    options=None,
    edge_features="bias",
):
    """Block outputs and logits of this rank's rows, every parameter gradient of the loss
    sum / global train count, the process group with its split, and the attention. ``comm``:
    how activation rows and their gradients travel (comm_dtype, comm_grad_dtype); ``chunks``:
    head groups exchanged one after another; ``regather``: the strategy's ``regather_kv``;
    ``options``: the model's ModelOptions (default: GAT's shape, which MODEL declares)."""
    parallel = ParallelConfig(comm_dtype=comm[0], comm_grad_dtype=comm[1], comm_chunks=chunks, regather_kv=regather)
    ctx = StrategyContext(
        heads=HEADS, backend=backend, model=MODEL, control=control, log=lambda _: None, parallel=parallel
    )
    pg, rank_graph, attention = rank_attention(graph, pg, strategy, ctx, partition_method=None)
    torch.manual_seed(0)
    options = options if options is not None else GAT
    if graph.edge_attr is not None:  # a graph with edge features: read them
        options = dataclasses.replace(options, edge_features=edge_features)
    model = GraphTransformer(
        graph.num_features,
        5,
        hidden=HIDDEN,
        heads=HEADS,
        layers=LAYERS,
        dropout=0.3,
        input_dropout=0.2,
        attention_dropout=0.3,
        seed=7,
        options=options,
        edge_dim=graph.num_edge_features,
    )
    outputs = []
    for block in model.blocks:
        block.register_forward_hook(lambda mod, inp, out: outputs.append(out))
    if checkpointed:
        checkpoint_blocks(model)
    nodes = rank_graph.nodes
    logits = model(nodes.x, attention, nodes.node_ids, step=3)
    train = nodes.train_mask
    loss = F.cross_entropy(logits[train], nodes.y[train], reduction="sum") / int(graph.train_mask.sum())
    loss.backward()
    return [*outputs, logits], {name: p.grad for name, p in model.named_parameters()}, pg, attention


def declared_bytes(
    strategy: str, graph, split: RowSplit, checkpointed: bool = False, chunks: int = 1, edges: str = "none"
) -> float:
    """What the strategy's cost terms say the busiest rank sends for the whole model (with every
    block checkpointed, the forward's collectives run once more per layer). With edge values GP-A2A
    also gathers them once per run (not per layer, so not in its cost terms): the padded all-gather
    of the ranks' [e, C], max(e) x C x 4 bytes to each other rank."""
    starts = split.starts
    shape_split = SplitShape.from_quality(
        partition_quality(graph, [(starts[r], starts[r + 1]) for r in range(split.world_size)])
    )
    p = split.world_size
    shape = GraphShape(graph.num_nodes, graph.num_edges, rows={p: shape_split}, partitions={p: shape_split})
    values = graph.num_edge_features + 1 if edges == "bias_value" else 0
    model = ModelShape(
        layers=LAYERS,
        hidden=HIDDEN,
        heads=HEADS,
        parallel=ParallelConfig(comm_chunks=chunks),
        edge_bias=graph.edge_attr is not None,
        edge_values=values,
    )
    terms = get_strategy(strategy).cost(p, shape, model, 4)
    once = max(shape_split.part_edges) * values * 4 * (p - 1) if strategy == "a2a" else 0
    return (terms.bytes_sent + (terms.forward_bytes if checkpointed else 0.0)) * LAYERS + once


def rel_err(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _check_strategy(rank, world, tmp, strategy, edges="none"):
    import deepspeed.comm as dist

    graph = random_graph(edge_features=0 if edges == "none" else 3)  # rows with no in-edges (no self loops), a hub row
    assert int((graph.in_degrees() == 0).sum()) >= 3
    forward_backward_ = functools.partial(forward_backward, edge_features=edges)
    ref_outs, ref_grads, _, _ = forward_backward_(graph, GraphParallelGroup.single(graph.num_nodes), DEFAULT_STRATEGY)
    split = RowSplit(SPLITS[world])
    pg = GraphParallelGroup.from_world().with_split(split)
    outs, grads, pg, attention = forward_backward_(graph, pg, strategy)
    start, end = pg.rows
    for out, ref in zip(outs, ref_outs):
        assert rel_err(out, ref[start:end]) < 1e-5, strategy
    for name, grad in grads.items():
        dist.all_reduce(grad)  # what DeepSpeed's gradient reduction does (before its 1/W)
        assert rel_err(grad, ref_grads[name]) < 1e-5, (strategy, name, rel_err(grad, ref_grads[name]))
    sent = torch.tensor([float(pg.stats.bytes_sent)])
    dist.all_reduce(sent, op=dist.ReduceOp.MAX)
    assert sent.item() == declared_bytes(attention.name, graph, split, edges=edges), (strategy, sent.item())
    assert pg.stats.calls > 0
    _, grads_ckpt, pg, _ = forward_backward_(
        graph, GraphParallelGroup.from_world().with_split(split), strategy, checkpointed=True
    )
    for name, grad in grads_ckpt.items():  # a recompute re-runs the collectives and gives the same gradients
        dist.all_reduce(grad)
        assert rel_err(grad, ref_grads[name]) < 1e-5, (strategy, "checkpointed", name)
    sent = torch.tensor([float(pg.stats.bytes_sent)])
    dist.all_reduce(sent, op=dist.ReduceOp.MAX)
    assert sent.item() == declared_bytes(attention.name, graph, split, checkpointed=True, edges=edges), (
        strategy,
        "checkpointed",
        sent.item(),
    )
    outs, grads, pg, _ = forward_backward_(graph, GraphParallelGroup.from_world().with_split(split), strategy, chunks=2)
    for out, ref in zip(outs, ref_outs):  # heads exchanged in two groups, the second during the first's attention
        assert rel_err(out, ref[start:end]) < 1e-5, (strategy, "chunks")
    for name, grad in grads.items():
        dist.all_reduce(grad)
        assert rel_err(grad, ref_grads[name]) < 1e-5, (strategy, "chunks", name)
    sent = torch.tensor([float(pg.stats.bytes_sent)])
    dist.all_reduce(sent, op=dist.ReduceOp.MAX)
    assert sent.item() == declared_bytes(attention.name, graph, split, chunks=2, edges=edges), (
        strategy,
        "chunks",
        sent.item(),
    )


def _cases() -> list:
    """Every strategy on 2 and 4 ranks, without and with edge features; the fast lane (``smoke``)
    keeps each strategy's 2-rank run without them."""
    edges = {"none": "nodes", "bias": "edges", "bias_value": "edge-values"}
    smoke = {(2, "none"): pytest.mark.smoke}
    return [
        pytest.param(s, world, e, id=f"{s}-{world}-{edges[e]}", marks=smoke.get((world, e), ()))
        for s, world, e in itertools.product(strategy_names(), (2, 4), edges)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("strategy, world, edges", _cases())
def test_strategy_matches_single_process_and_its_declared_bytes(strategy, world, edges, tmp_path):
    if get_strategy(strategy).infeasible(HEADS, world):
        pytest.skip(get_strategy(strategy).infeasible(HEADS, world))
    if edges == "bias_value" and not get_strategy(strategy).edge_values:
        pytest.skip(f"{strategy} takes no edge-conditioned values (the config refuses the pair)")
    run(_check_strategy, world, tmp_path, strategy, edges)


def test_infeasible_strategy_says_why():
    graph = random_graph()
    pg = GraphParallelGroup(rank=0, world_size=3)
    for name in strategy_names():
        reason = get_strategy(name).infeasible(8, 3)
        if reason:
            with pytest.raises(ValueError, match=reason.split(";")[0]):
                rank_attention(graph, pg, name, StrategyContext(heads=8))
    with pytest.raises(ValueError, match=r"8 heads do not divide over 3 ranks; use --strategy ag"):
        get_strategy("a2a").check_feasible(8, 3)
