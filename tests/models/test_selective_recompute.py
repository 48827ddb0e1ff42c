"""Selective recomputation: a block keeps its attention's tensors, its input and the attention's
output, recomputes the rest in backward, and gives the same logits and gradients, bit for bit."""

import pytest
import torch

from dsgraph.comm import GraphParallelGroup
from dsgraph.models import GraphTransformer
from dsgraph.models.checkpointing import checkpoint_blocks, recompute_selectively
from dsgraph.models.options import GAT, ModelOptions
from dsgraph.modes.ranks import rank_attention
from dsgraph.parallel import StrategyContext
from tests.graphs import random_graph
from tests.train.helpers import step_keeping

HEADS = 4
TRANSFORMER = ModelOptions(
    block="transformer", input_projection=True, norm="pre", head="linear", global_attention="linear"
)
SEP = ModelOptions(block="transformer", input_projection=True, norm="post", head="linear", ego="sep")
GAT_GLOBAL = ModelOptions(**{**GAT.to_dict(), "global_attention": "linear"})


def _run(options, selective: bool, dtype=torch.float32):
    """(logits, parameter gradients, bytes autograd keeps) of one forward and backward."""
    graph = random_graph()
    torch.manual_seed(0)
    model = GraphTransformer(
        graph.num_features,
        5,
        hidden=32,
        heads=HEADS,
        layers=3,
        dropout=0.3,
        attention_dropout=0.2,
        seed=1,
        options=options,
    ).to(dtype)
    if selective:
        assert recompute_selectively(model)
    _, rank_graph, attention = rank_attention(
        graph,
        GraphParallelGroup.single(graph.num_nodes),
        "ag",
        StrategyContext(heads=HEADS, backend="cpu"),
        dtype=dtype,
    )
    return step_keeping(model, rank_graph, attention)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "options", [TRANSFORMER, SEP, GAT_GLOBAL], ids=["transformer-global", "transformer-sep", "gat-global"]
)
def test_selective_recompute_gives_the_same_step_and_keeps_less(options, dtype):
    plain_logits, plain_grads, plain_bytes = _run(options, False, dtype)
    logits, grads, kept = _run(options, True, dtype)
    assert torch.equal(logits, plain_logits)
    assert all(torch.equal(a, b) for a, b in zip(grads, plain_grads))
    assert kept < 0.7 * plain_bytes, (kept, plain_bytes)


def test_blocks_checkpointed_whole_are_left_alone():
    model = GraphTransformer(12, 5, hidden=32, heads=HEADS, layers=3, options=TRANSFORMER)
    assert checkpoint_blocks(model, 2) == [0, 2]
    assert recompute_selectively(model) == [1]
    assert [block.recompute for block in model.blocks] == [False, True, False]
