"""Linear global attention beside the local one, on 2 and 4 gloo processes in every registered
strategy: with uneven row splits, rows without in-edges and dropout on, every block output, the
logits and every parameter gradient equal the single-process run (fp32, 1e-5), also with every block
checkpointed; each rank sends exactly the strategy's declared bytes plus one all-reduce of the
per-head sums per layer forward and one backward (``GlobalAttentionCost``)."""

import dataclasses

import pytest
import torch

from dsgraph.comm import GraphParallelGroup, RowSplit
from dsgraph.comm.allreduce import all_reduce_bytes
from dsgraph.models import ModelOptions
from dsgraph.models.global_attention import sum_values
from dsgraph.models.options import GAT
from dsgraph.parallel import get_strategy, strategy_names
from dsgraph.parallel.shapes import GlobalAttentionCost, ModelShape
from dsgraph.train.config import DEFAULT_STRATEGY
from tests.distributed import run
from tests.graphs import random_graph
from tests.parallel.test_conformance import HEADS, HIDDEN, LAYERS, SPLITS, declared_bytes, forward_backward, rel_err

pytestmark = pytest.mark.slow  # every test here starts processes

GPS = ModelOptions(block="transformer", input_projection=True, norm="pre", head="linear", global_attention="linear")
GAT_GLOBAL = dataclasses.replace(GAT, global_attention="linear")  # GAT-shaped blocks: the first one reads the features
SHAPE = ModelShape(layers=LAYERS, hidden=HIDDEN, heads=HEADS, global_attention="linear")


def _sent(pg) -> float:
    import deepspeed.comm as dist

    sent = torch.tensor([float(pg.stats.bytes_sent)])
    dist.all_reduce(sent, op=dist.ReduceOp.MAX)
    return sent.item()


def _compare(outs, grads, ref_outs, ref_grads, rows, what):
    import deepspeed.comm as dist

    start, end = rows
    for out, ref in zip(outs, ref_outs):
        assert rel_err(out, ref[start:end]) < 1e-5, what
    for name, grad in grads.items():
        dist.all_reduce(grad)  # what DeepSpeed's gradient reduction does (before its 1/W)
        assert rel_err(grad, ref_grads[name]) < 1e-5, (what, name, rel_err(grad, ref_grads[name]))


def _check(rank, world, tmp, strategy, options, hidden_layers):
    graph = random_graph()
    split = RowSplit(SPLITS[world])
    ref_outs, ref_grads, _, _ = forward_backward(
        graph, GraphParallelGroup.single(graph.num_nodes), DEFAULT_STRATEGY, options=options
    )
    for checkpointed in (False, True):
        pg = GraphParallelGroup.from_world().with_split(split)
        outs, grads, pg, attention = forward_backward(graph, pg, strategy, checkpointed=checkpointed, options=options)
        _compare(outs, grads, ref_outs, ref_grads, pg.rows, (strategy, checkpointed))
        g = GlobalAttentionCost.of(world, SHAPE)
        assert g.forward_bytes == all_reduce_bytes(4 * sum_values(HEADS, HIDDEN // HEADS), world) > 0
        local = declared_bytes(attention.name, graph, split, checkpointed=checkpointed)
        want = local + hidden_layers * (g.bytes_sent + (g.forward_bytes if checkpointed else 0))
        assert _sent(pg) == want, (strategy, checkpointed, _sent(pg), want)


CASES = [(s, GPS, LAYERS) for s in strategy_names()] + [(DEFAULT_STRATEGY, GAT_GLOBAL, LAYERS - 1)]


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("strategy, options, hidden_layers", CASES, ids=[f"{s}-{o.block}" for s, o, _ in CASES])
def test_global_attention_matches_single_process_in_every_strategy(strategy, options, hidden_layers, world, tmp_path):
    if get_strategy(strategy).infeasible(HEADS, world):
        pytest.skip(get_strategy(strategy).infeasible(HEADS, world))
    run(_check, world, tmp_path, strategy, options, hidden_layers)
