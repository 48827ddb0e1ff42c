"""GP-AG and GP-A2A on 2 and 4 ranks equal the single-process model: every block's output, the
logits and every parameter gradient (fp32, relative to the norm), with dropout on, on a graph whose
node count does not divide by P and that has rows with no in-edges."""

import pytest
import torch
import torch.nn.functional as F

from dsgraph.comm import GraphParallelGroup, even_row_counts, row_starts
from dsgraph.models import GraphTransformer
from dsgraph.parallel import build_strategy
from tests.distributed import run
from tests.graphs import random_graph

HEADS = 4


def _forward_backward(graph, counts, pg, strategy, rows):
    torch.manual_seed(0)
    model = GraphTransformer(graph.num_features, 5, hidden=32, heads=HEADS, layers=2, dropout=0.3, input_dropout=0.2, attention_dropout=0.3, seed=7)
    block_outputs = []
    for block in model.blocks:
        block.register_forward_hook(lambda mod, inp, out: block_outputs.append(out))
    attention = build_strategy(strategy, graph, counts, pg, HEADS, backend="reference")
    logits = model(graph.x[rows], attention, torch.arange(rows.start, rows.stop), step=3)
    train = graph.train_mask[rows]
    loss = F.cross_entropy(logits[train], graph.y[rows][train], reduction="sum") / int(graph.train_mask.sum())
    loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    return [*block_outputs, logits], grads


def _rel_err(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _check_equivalence(rank, world, tmp):
    import deepspeed.comm as dist

    graph = random_graph()  # keep rows with no in-edges (no self loops)
    assert graph.num_nodes % world != 0 and int((graph.in_degrees() == 0).sum()) >= 3
    full = range(0, graph.num_nodes)
    ref_outs, ref_grads = _forward_backward(graph, [graph.num_nodes], GraphParallelGroup(), "ag", full)
    counts = even_row_counts(graph.num_nodes, world)
    start = row_starts(counts)[rank]
    rows = range(start, start + counts[rank])
    pg = GraphParallelGroup.from_world()
    for strategy in ("ag", "a2a"):
        outs, grads = _forward_backward(graph, counts, pg, strategy, rows)
        for out, ref in zip(outs, ref_outs):
            assert _rel_err(out, ref[start : rows.stop]) < 1e-5, strategy
        for name, grad in grads.items():
            dist.all_reduce(grad)  # what DeepSpeed's gradient reduction does (before its 1/W)
            assert _rel_err(grad, ref_grads[name]) < 1e-5, (strategy, name, _rel_err(grad, ref_grads[name]))
        assert pg.stats.bytes_sent > 0 and pg.stats.calls > 0


@pytest.mark.parametrize("world", [2, 4])
def test_strategies_match_single_process(world, tmp_path):
    run(_check_equivalence, world, tmp_path)


def test_a2a_rejects_heads_not_divisible_by_ranks():
    graph = random_graph()
    pg = GraphParallelGroup(rank=0, world_size=3)
    with pytest.raises(ValueError, match=r"8 heads do not divide over 3 ranks; use --strategy ag"):
        build_strategy("a2a", graph, even_row_counts(graph.num_nodes, 3), pg, heads=8)
