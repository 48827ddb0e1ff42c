"""BatchNorm over the attention's global scope against torch's BatchNorm1d, jumping knowledge's
classifier widths, 15-layer models, and which options make the run add no self loops."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from dsgraph.models import GAT, TRANSFORMER, ModelOptions
from dsgraph.models.norms import BatchNorm
from dsgraph.train.config import DsgraphConfig
from tests.graphs import random_graph
from tests.models.test_graph_transformer import _local_attention, _model


def test_batch_norm_matches_torch_in_training_and_evaluation():
    x = torch.randn(50, 6, dtype=torch.float32) * 3 + 1
    ours, theirs = BatchNorm(6), torch.nn.BatchNorm1d(6)
    for step in range(3):
        xs = (x * (step + 1)).requires_grad_()
        xt = xs.detach().clone().requires_grad_()
        y, want = ours(xs, None), theirs(xt)
        assert torch.allclose(y, want, atol=1e-5)
        (y * torch.arange(6.0)).sum().backward()
        (want * torch.arange(6.0)).sum().backward()
        assert torch.allclose(xs.grad, xt.grad, atol=1e-5)
    assert torch.allclose(ours.running_mean, theirs.running_mean, atol=1e-5)
    assert torch.allclose(ours.running_var, theirs.running_var, atol=1e-4)
    ours.eval(), theirs.eval()
    assert torch.allclose(ours(x, None), theirs(x), atol=1e-5)


@pytest.mark.parametrize("jk, width", [("cat", 3 * 32), ("max", 32)])
def test_jumping_knowledge_feeds_the_classifier(jk, width):
    model = _model(dataclasses.replace(TRANSFORMER, block="sage", jk=jk), layers=3)
    assert model.classifier.in_features == width
    graph = random_graph()
    logits = model(graph.x, _local_attention(graph), torch.arange(graph.num_nodes))
    assert logits.shape == (graph.num_nodes, 5)


@pytest.mark.parametrize("block", ["gcn", "sage", "attention", "transformer"])
def test_fifteen_layers_with_batch_norm_train_every_parameter(block):
    options = ModelOptions(block=block, ego="sep", norm="post", norm_type="batch", jk="cat", global_attention="none")
    model = _model(options, layers=15)
    graph = random_graph()
    logits = model(graph.x, _local_attention(graph), torch.arange(graph.num_nodes), step=1)
    F.cross_entropy(logits, graph.y).backward()
    assert torch.isfinite(logits).all()
    assert not [name for name, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]


def test_sep_and_sage_add_no_self_loops_and_wrong_pairs_are_errors():
    assert DsgraphConfig().adds_self_loops
    assert not DsgraphConfig.from_dict({"model": {"ego": "sep"}}).adds_self_loops
    assert not DsgraphConfig.from_dict({"model": {"block": "sage"}}).adds_self_loops
    assert not DsgraphConfig.from_dict({"self_loops": False}).adds_self_loops
    with pytest.raises(ValueError, match="block 'gcn' has no scores"):
        ModelOptions(block="gcn", edge_features="bias")
    with pytest.raises(ValueError, match="'model.jk' 'cat' feeds the classifier"):
        dataclasses.replace(GAT, jk="cat")
