"""Activation checkpointing recomputes every block's forward in backward and takes the same steps:
losses equal to 1e-6 with and without it, on 1, 2 and 4 ranks, for every registered strategy (a
recompute runs the strategy's collectives again); and it keeps less for backward."""

import pytest
import torch

from dsgraph.models import GraphTransformer
from dsgraph.models.checkpointing import checkpoint_blocks
from dsgraph.models.options import GAT, TRANSFORMER, ModelOptions
from dsgraph.modes.ranks import rank_attention
from dsgraph.parallel import get_strategy, strategy_names
from tests.distributed import run
from tests.graphs import random_graph
from tests.train.helpers import dump_losses, load, step_keeping, write_random_graph

HEADS = 4  # make_trainer's model


TRANSFORMER_MODEL = {"block": "transformer", "head": "linear"}
VARIANTS = {  # name: (settings, the name of the run without checkpointing it must equal)
    "ckpt": (dict(checkpoint_activations=True), "plain"),
    "tr-nested": (dict(checkpoint_activations=True, checkpoint_nested=True, model=TRANSFORMER_MODEL), "tr-plain"),
    "plain": (dict(checkpoint_activations=False), None),
    "tr-plain": (dict(checkpoint_activations=False, model=TRANSFORMER_MODEL), None),
}


def _steps(rank, world, tmp):
    strategies = [s for s in strategy_names() if not get_strategy(s).infeasible(HEADS, world)]
    runs = {
        f"{s}/{v}": dict(strategy=s, layers=3, attention_dropout=0.2, **VARIANTS[v][0])  # every dropout site
        for s in strategies
        for v in VARIANTS
    }
    dump_losses(rank, tmp, f"ckpt_{world}.json", runs, epochs=2)


@pytest.mark.slow
def test_checkpointed_training_takes_the_same_steps_on_1_2_and_4_ranks(tmp_path):
    """The default (GAT-shaped) block recomputed whole; the Transformer block nested (the block, then
    each sublayer inside it)."""
    write_random_graph(str(tmp_path))
    for world in (1, 2, 4):
        run(_steps, world, tmp_path)
        losses = load(tmp_path, f"ckpt_{world}.json")
        for key, got in losses.items():
            strategy, variant = key.split("/")
            if VARIANTS[variant][1] is not None:
                want = losses[f"{strategy}/{VARIANTS[variant][1]}"]
                assert got == pytest.approx(want, rel=1e-6, abs=1e-6), (world, key, got, want)


def _saved_bytes(
    checkpointed: bool, every: int = 1, options=None, nested: bool = False
) -> tuple[int, list[torch.Tensor]]:
    from dsgraph.comm import GraphParallelGroup
    from dsgraph.parallel import StrategyContext

    graph = random_graph()
    torch.manual_seed(0)
    model = GraphTransformer(graph.num_features, 5, hidden=32, heads=HEADS, layers=4, seed=1, options=options)
    if checkpointed:
        assert checkpoint_blocks(model, every, nested) == list(range(0, 4, every))
    _, rank_graph, attention = rank_attention(
        graph, GraphParallelGroup.single(graph.num_nodes), "ag", StrategyContext(heads=HEADS, backend="reference")
    )
    _, grads, kept = step_keeping(model, rank_graph, attention)
    return kept, grads


@pytest.mark.parametrize("options", [GAT, TRANSFORMER, ModelOptions()], ids=["gat", "transformer", "default"])
def test_checkpointing_keeps_less_and_gives_the_same_gradients(options):
    """The transformer block (the default's too) is checkpointed per sublayer (attention, FFN), GAT's per block."""
    plain, plain_grads = _saved_bytes(False, options=options)
    every, every_grads = _saved_bytes(True, 1, options)
    half, _ = _saved_bytes(True, 2, options)
    nested, nested_grads = _saved_bytes(True, 1, options, nested=True)
    assert every < half < plain
    if options.block == "transformer":  # the block keeps its input, not also its FFN's input: 4 rows of 32 less
        assert every - nested == 4 * 32 * 4 * random_graph().num_nodes
    else:  # a block without sublayers is recomputed whole either way
        assert nested == every
    for grads in (every_grads, nested_grads):
        for a, b in zip(grads, plain_grads):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="checkpoint_every_layers must be >= 1"):
        checkpoint_blocks(GraphTransformer(4, 2, hidden=8, heads=2, layers=1), 0)
