"""The Graph Transformer's architecture options: which layers each builds, the output attention
layer's padded head dim and head average, feature normalisation, and rank independence of every
option on 2 gloo ranks against the single-process model."""

import dataclasses
import glob
import itertools

import pytest
import torch
import torch.nn.functional as F

from dsgraph.comm import GraphParallelGroup, RowSplit
from dsgraph.models import GAT, TRANSFORMER, GraphTransformer, ModelOptions
from dsgraph.models.blocks import AttentionBlock, OutputAttention, TransformerBlock, padded_head_dim
from dsgraph.models.options import BLOCKS, HEADS, NORMS, RESIDUALS
from dsgraph.modes.ranks import rank_attention
from dsgraph.ops import sparse_attention
from dsgraph.parallel import StrategyContext
from tests.distributed import run
from tests.graphs import random_graph

ALL_OPTIONS = [
    ModelOptions(block=b, input_projection=p, norm=n, residual=r, head=h)
    for b, p, n, r, h in itertools.product(BLOCKS, (False, True), NORMS, RESIDUALS, HEADS)
]


def _model(options, layers=3, classes=5, features=12, **kw):
    torch.manual_seed(0)
    return GraphTransformer(
        features,
        classes,
        hidden=32,
        heads=4,
        layers=layers,
        ffn_mult=2,
        dropout=0.3,
        input_dropout=0.2,
        attention_dropout=0.3,
        seed=7,
        options=options,
        **kw,
    )


def _local_attention(graph):
    def attention(q, k, v):
        return sparse_attention(graph.rowptr, graph.col, q, k, v, backend="reference")

    attention.degrees = graph.rowptr.diff()  # what every strategy's attention carries (block 'gcn' reads it)
    return attention


def test_the_default_is_the_transformer_with_global_attention():
    assert ModelOptions() == dataclasses.replace(TRANSFORMER, global_attention="linear")


def test_gat_is_gat_shaped_with_layers_counting_the_output_layer():
    model = _model(GAT, layers=3)
    assert [type(b) for b in model.blocks] == [AttentionBlock, AttentionBlock, OutputAttention]
    assert model.input is None and model.classifier is None
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    # the first block reads the 12 features, so it has no identity path; the second has one
    assert [b.residual.identity for b in model.blocks[:2]] == [False, True]


def test_transformer_preset_is_the_pre_ln_block_with_a_classifier():
    model = _model(TRANSFORMER, layers=2)
    assert [type(b) for b in model.blocks] == [TransformerBlock, TransformerBlock]
    assert model.input is not None and model.classifier is not None and model.norm is not None
    assert all(b.residual.identity for b in model.blocks)


@pytest.mark.parametrize("classes, head_dim", [(2, 8), (7, 8), (8, 8), (9, 16), (40, 64), (128, 128), (150, 150)])
def test_output_layer_pads_the_class_dim_to_a_kernel_head_dim(classes, head_dim):
    assert padded_head_dim(classes) == head_dim
    shapes = []

    def attention(q, k, v):
        shapes.append((q.shape, k.shape, v.shape))
        return v

    layer = OutputAttention(16, classes, heads=4)
    out = layer(torch.randn(10, 16), attention, torch.arange(10), 0, 0, 1)
    assert out.shape == (10, classes)
    assert shapes == [((10, 4, head_dim),) * 3]


def test_output_layer_averages_the_heads_of_class_logits():
    """With an attention that returns its values, the output is the mean over heads of h W_v."""
    layer = OutputAttention(16, 7, heads=4)
    h = torch.randn(10, 16)
    got = layer(h, lambda q, k, v: v, torch.arange(10), 0, 0, 1)
    want = layer.value(h).view(10, 4, 7).mean(1)
    torch.testing.assert_close(got, want)
    padded = []
    layer(h, lambda q, k, v: padded.append(v) or v, torch.arange(10), 0, 0, 1)
    assert torch.count_nonzero(padded[0][..., 7:]) == 0  # the padding is zeros


def test_row_feature_norm_makes_the_output_independent_of_each_rows_scale():
    graph = random_graph().with_self_loops()
    x = graph.x.abs()
    scale = torch.rand(graph.num_nodes, 1) * 10 + 0.1
    for feature_norm, same in (("row", True), ("none", False)):
        model = _model(ModelOptions(feature_norm=feature_norm)).eval()
        a = model(x, _local_attention(graph), torch.arange(graph.num_nodes))
        b = model(x * scale, _local_attention(graph), torch.arange(graph.num_nodes))
        assert torch.allclose(a, b, atol=1e-5) == same, feature_norm


@pytest.mark.parametrize(
    "options", ALL_OPTIONS, ids=lambda o: f"{o.block}-proj{int(o.input_projection)}-{o.norm}-{o.residual}-{o.head}"
)
def test_every_option_trains_every_parameter(options):
    """Forward and backward on a small graph: logits [n, C], finite, and every parameter gets a gradient
    (ZeRO reduces every parameter's gradient; an unused one would be a silent dead weight)."""
    graph = random_graph().with_self_loops()
    model = _model(options)
    logits = model(graph.x, _local_attention(graph), torch.arange(graph.num_nodes), step=1)
    assert logits.shape == (graph.num_nodes, 5) and torch.isfinite(logits).all()
    F.cross_entropy(logits, graph.y).backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing


def test_bad_choices_and_depth_are_errors():
    with pytest.raises(ValueError, match=r"'model.norm' must be one of none, pre, post; got 'mid'"):
        ModelOptions(norm="mid")
    with pytest.raises(ValueError, match="at least one attention layer"):
        _model(ModelOptions(), layers=0)


RANK_OPTIONS = [
    GAT,
    TRANSFORMER,
    dataclasses.replace(GAT, norm="post", residual="linear", feature_norm="row"),
    dataclasses.replace(GAT, block="transformer"),
    ModelOptions(),
    dataclasses.replace(TRANSFORMER, propagation_steps=3, propagation_alpha=0.2),
]


def _outputs(graph, pg, strategy, options):
    """Logits of this rank's rows and every parameter gradient of the global-mean training loss."""
    ctx = StrategyContext(heads=4, backend="reference", log=lambda line: None)
    pg, rank_graph, attention = rank_attention(graph, pg, strategy, ctx, partition_method=None)
    model = _model(options)
    nodes = rank_graph.nodes
    logits = model(nodes.x, attention, nodes.node_ids, step=3)
    loss = F.cross_entropy(logits[nodes.train_mask], nodes.y[nodes.train_mask], reduction="sum") / int(
        graph.train_mask.sum()
    )
    loss.backward()
    return logits, {name: p.grad for name, p in model.named_parameters()}, pg


def _check_ranks(rank, world, tmp):
    import deepspeed.comm as dist

    graph = random_graph().with_self_loops()
    graph.x = graph.x.abs()  # non-negative features, as row normalisation expects
    for strategy in ("ag", "a2a"):
        for options in RANK_OPTIONS:
            ref_logits, ref_grads, _ = _outputs(graph, GraphParallelGroup.single(graph.num_nodes), strategy, options)
            pg = GraphParallelGroup.from_world().with_split(RowSplit((40, 63)))
            logits, grads, pg = _outputs(graph, pg, strategy, options)
            start, end = pg.rows
            torch.testing.assert_close(logits, ref_logits[start:end], rtol=1e-5, atol=1e-6)
            for name, grad in grads.items():
                dist.all_reduce(grad)
                torch.testing.assert_close(
                    grad, ref_grads[name], rtol=1e-4, atol=1e-6, msg=f"{strategy} {options} {name}"
                )


@pytest.mark.slow
def test_every_architecture_gives_the_same_logits_and_gradients_on_two_ranks(tmp_path):
    run(_check_ranks, 2, tmp_path)


@pytest.mark.parametrize("config", sorted(glob.glob("ds_configs/*.json")))
@pytest.mark.parametrize("num_classes", [3, 7, 40, 47])  # PubMed, Cora, ogbn-arxiv, ogbn-products
def test_shipped_models_keep_the_heads_and_head_dims_the_strategies_and_kernels_need(config, num_classes):
    """Every attention layer of a shipped config's model (the output layer too) runs cfg.heads heads,
    so GP-A2A's check of cfg.heads against the rank count holds for every layer, with a head dim the
    CUDA kernels support (HEAD_DIMS), whatever the class count of the graph (a link task's encoder
    gives its embedding width instead of classes)."""
    from dsgraph.graph.encodings import arrays_of, spec_of_array
    from dsgraph.graph.rank_graph import EdgeData
    from dsgraph.ops.cuda_source import HEAD_DIMS
    from dsgraph.train.config import load_ds_config
    from dsgraph.train.trainer import build_model

    _, cfg = load_ds_config(config)
    edge_dim = 4 if cfg.model.reads_edges else 0  # a config that reads edge features gets a graph with them
    specs = {name: spec_of_array(name) for name in arrays_of(cfg.model.encodings)}
    enc = {  # counts, or the width `dsgraph encode` suggests (cpu_gps.json: RWSE K=16)
        name: torch.randint(0, 9, (6, len(spec.embeddings))) if spec.embeddings else torch.rand(6, spec.default_width)
        for name, spec in specs.items()
    }
    model = build_model(cfg, 100, num_classes, {name: a.shape[1] for name, a in enc.items()}, edge_dim=edge_dim).eval()
    calls = []

    class Attention:
        edges = EdgeData.of(torch.rand(10, edge_dim), None) if edge_dim else None
        degrees = torch.ones(6, dtype=torch.int64)  # block 'gcn' and APPNP's propagation read them

        def __call__(self, q, k, v, bias=None, edge_values=None):
            calls.append((v.shape[1:],) * 3 if q is None else (q.shape[1:], k.shape[1:], v.shape[1:]))
            return v if edge_values is None else (v, v.new_zeros((*v.shape[:2], edge_values.shape[1])))

    logits = model(torch.rand(6, 100), Attention(), torch.arange(6), enc=enc)
    outputs = cfg.link.embedding_dim if cfg.task == "link" else num_classes
    assert logits.shape == (6, outputs) and len(calls) == cfg.layers + cfg.model.propagation_steps
    for q, k, v in calls:  # constant scores (q = k = None) count as v's shape
        assert q == k == v and q[0] == cfg.heads and q[1] in HEAD_DIMS, (config, calls)
    assert cfg.heads % 2 == 0 and cfg.heads % 4 == 0, "the shipped head counts split over 2 and 4 ranks"
