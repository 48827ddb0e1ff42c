"""Node encodings in the model (``dsgraph/models/encodings.py``): what 'concat' and 'add' feed in,
LapPE's sign flips (keyed by seed and step, only in training), the degree cap; and, on 2 and 4 gloo
processes with every strategy, logits and every parameter gradient equal to the single-process run
with RWSE, LapPE and degree encodings on (fp32, dropout on, uneven splits, rows without in-edges),
alone and together with linear global attention (the GraphGPS shape: encodings, local and global
attention in one model)."""

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dsgraph.comm import GraphParallelGroup, RowSplit
from dsgraph.graph.encode.adjacency import from_edges
from dsgraph.graph.encode.lappe import lappe
from dsgraph.graph.encode.rwse import exact_rwse
from dsgraph.graph.encodings import arrays_of
from dsgraph.models import GAT, TRANSFORMER, GraphTransformer
from dsgraph.models.encodings import NodeEncoder, lappe_signs
from dsgraph.modes.ranks import rank_attention
from dsgraph.parallel import StrategyContext, get_strategy, strategy_names
from dsgraph.parallel.shapes import ModelShape
from tests.distributed import run
from tests.graphs import random_graph

HEADS, HIDDEN = 4, 32
SPLITS = {2: (40, 63), 4: (10, 31, 20, 42)}  # random_graph has 103 nodes: uneven on purpose
ALL = ("rwse", "lappe", "degree")
OPTIONS = {
    "concat": dataclasses.replace(GAT, encodings=ALL, max_degree=5),
    "add": dataclasses.replace(TRANSFORMER, encodings=ALL, encoding_input="add"),
}
OPTIONS.update(
    {
        f"{combine}-global": dataclasses.replace(options, global_attention="linear")
        for combine, options in OPTIONS.items()
    }
)


def encoded_graph():
    """random_graph with exact RWSE (K=5) and LapPE (k=3) in graph.enc (beside its degrees)."""
    graph = random_graph()
    adj = from_edges(
        graph.col.numpy(), np.repeat(np.arange(graph.num_nodes), graph.in_degrees().numpy()), graph.num_nodes
    )
    vecs, vals, _ = lappe(adj, 3)
    graph.enc.update(
        rwse=torch.from_numpy(exact_rwse(adj, 5)), lappe=torch.from_numpy(vecs), lappe_eigvals=torch.from_numpy(vals)
    )
    return graph


def test_encoder_widths_signs_and_degree_cap():
    enc = {k: v[:7] for k, v in encoded_graph().enc.items()}
    widths = {k: v.shape[1] for k, v in enc.items()}
    concat = NodeEncoder(ALL, widths, combine="concat", hidden=HIDDEN, max_degree=3, degree_dim=4)
    assert concat.concat_width == 5 + 3 + 3 + 4
    out = concat.eval()(enc, seed=1, step=2, dtype=torch.float32)
    assert out.shape == (7, 15) and torch.equal(
        out[:, :11], torch.cat([enc["rwse"], enc["lappe"], enc["lappe_eigvals"]], 1)
    )
    signs = lappe_signs(1, 2, 3)
    assert torch.equal(signs, lappe_signs(1, 2, 3)) and set(signs.tolist()) <= {-1.0, 1.0}
    assert any(not torch.equal(lappe_signs(1, s, 3), signs) for s in range(3, 10))
    flipped = concat.train()(enc, seed=1, step=2, dtype=torch.float32)
    assert torch.equal(flipped[:, 5:8], enc["lappe"] * signs) and torch.equal(flipped[:, 8:], out[:, 8:])
    capped = dict(enc, degree=enc["degree"].clamp(max=3))
    assert torch.equal(concat.eval()(capped, 1, 2, torch.float32), out) and int(enc["degree"].max()) > 3
    add = NodeEncoder(ALL, widths, combine="add", hidden=HIDDEN, max_degree=3, degree_dim=4)
    assert add.concat_width == 0 and add.eval()(enc, 1, 2, torch.float32).shape == (7, HIDDEN)
    with pytest.raises(ValueError, match="no lappe"):
        NodeEncoder(ALL, {"rwse": 5, "degree": 2}, combine="concat", hidden=HIDDEN, max_degree=3, degree_dim=4)
    with pytest.raises(ValueError, match="its input carries"):
        concat(None, 1, 2, torch.float32)


def forward_backward(graph, pg, strategy, options):
    ctx = StrategyContext(
        heads=HEADS, backend="reference", model=ModelShape(layers=2, hidden=HIDDEN, heads=HEADS), log=lambda line: None
    )
    pg, rank_graph, attention = rank_attention(graph, pg, strategy, ctx, encodings=arrays_of(options.encodings))
    torch.manual_seed(0)
    widths = {k: v.shape[1] for k, v in rank_graph.nodes.enc.items()}
    model = GraphTransformer(
        graph.num_features,
        5,
        hidden=HIDDEN,
        heads=HEADS,
        layers=2,
        dropout=0.3,
        input_dropout=0.2,
        attention_dropout=0.3,
        seed=7,
        options=options,
        encoding_widths=widths,
    )
    nodes = rank_graph.nodes
    logits = model(nodes.x, attention, nodes.node_ids, step=3, enc=nodes.enc)
    train = nodes.train_mask
    loss = F.cross_entropy(logits[train], nodes.y[train], reduction="sum") / int(graph.train_mask.sum())
    loss.backward()
    return logits, {name: p.grad for name, p in model.named_parameters()}, pg


def _check(rank, world, tmp):
    import deepspeed.comm as dist

    graph = encoded_graph()
    for combine, options in OPTIONS.items():
        ref_logits, ref_grads, _ = forward_backward(graph, GraphParallelGroup.single(graph.num_nodes), "ag", options)
        assert ref_grads["encoder.in_degree.weight"].abs().sum() > 0
        global_grads = [g for name, g in ref_grads.items() if ".global_attn." in name]
        assert bool(global_grads) == combine.endswith("-global") and all(g.abs().sum() > 0 for g in global_grads)
        for strategy in strategy_names():
            if get_strategy(strategy).infeasible(HEADS, world):
                continue
            pg = GraphParallelGroup.from_world().with_split(RowSplit(SPLITS[world]))
            logits, grads, pg = forward_backward(graph, pg, strategy, options)
            start, end = pg.rows
            err = (logits - ref_logits[start:end]).norm() / ref_logits[start:end].norm()
            assert err < 1e-5, (combine, strategy, float(err))
            for name, grad in grads.items():
                dist.all_reduce(grad)
                assert (grad - ref_grads[name]).norm() <= 1e-5 * ref_grads[name].norm().clamp_min(1e-30), (
                    combine,
                    strategy,
                    name,
                )


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_encodings_on_every_strategy_match_the_single_process_run(world, tmp_path):
    run(_check, world, tmp_path)
