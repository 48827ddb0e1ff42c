"""Hits@K and MRR equal OGB's link evaluators (written here again in torch, as ogb.linkproppred
computes them) on scores with ties, for shared and per-positive negatives; the link evaluation
puts every rank's scores back in order."""

import numpy as np
import pytest
import torch

from dsgraph.tasks import scores
from dsgraph.tasks.link_metrics import assemble, link_values


def _ogb_hits(pos, neg, k):
    """ogb.linkproppred.Evaluator._eval_hits."""
    pos, neg = torch.as_tensor(pos), torch.as_tensor(neg)
    if len(neg) < k:
        return 1.0
    kth = torch.topk(neg, k)[0][-1]
    return float(torch.sum(pos > kth)) / len(pos)


def _ogb_rank_list(pos, neg):
    """ogb.linkproppred.Evaluator._eval_mrr's ranks (negatives [n, K] per positive)."""
    pos, neg = torch.as_tensor(pos).view(-1, 1), torch.as_tensor(neg)
    optimistic = (neg > pos).sum(dim=1)
    pessimistic = (neg >= pos).sum(dim=1)
    return (0.5 * (optimistic + pessimistic) + 1).double()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hits_and_mrr_equal_ogb(seed):
    rng = np.random.default_rng(seed)
    pos = np.round(rng.normal(1.0, 1.0, 60), 1)  # rounded: ties between positives and negatives
    shared = np.round(rng.normal(0.0, 1.0, 300), 1)
    own = np.round(rng.normal(0.0, 1.0, (60, 25)), 1)
    for k in (1, 10, 50, 299, 300, 301):
        assert scores.hits_at_k(pos, shared, k) == pytest.approx(_ogb_hits(pos, shared, k), abs=1e-12)
    ranks = _ogb_rank_list(pos, own)
    assert scores.mrr(pos, own) == pytest.approx(float((1.0 / ranks).mean()), abs=1e-12)
    for k in (1, 3, 10):
        assert scores.hits_at_k(pos, own, k) == pytest.approx(float((ranks <= k).double().mean()), abs=1e-12)
    every = _ogb_rank_list(pos, np.tile(shared, (60, 1)))  # a shared set: every positive against all of it
    assert scores.mrr(pos, shared) == pytest.approx(float((1.0 / every).mean()), abs=1e-12)
    assert np.isnan(scores.mrr([], shared)) and np.isnan(scores.hits_at_k([], shared, 3))


def test_link_values_from_scattered_parts():
    """Two ranks' parts of the six sets (any order) give the metrics of the sets in order."""
    rng = np.random.default_rng(0)
    sizes = {
        ("train", "pos"): 8,
        ("train", "neg"): 8,
        ("val", "pos"): 5,
        ("val", "neg"): 10,
        ("test", "pos"): 4,
        ("test", "neg"): 4,
    }
    full = {key: rng.normal(size=n) for key, n in sizes.items()}
    entries = [(code, i, full[key][i]) for code, key in enumerate(sizes) for i in range(sizes[key])]
    rng.shuffle(entries)
    parts = [tuple(np.array(c) for c in zip(*entries[half::2])) for half in (0, 1)]
    parts = [(s.astype(np.int64), i.astype(np.int64), v) for s, i, v in parts]
    got = link_values(assemble(parts, sizes), {"val": 2}, [3])
    val_pos, val_neg = full[("val", "pos")], full[("val", "neg")]
    assert got["val_mrr"] == pytest.approx(scores.mrr(val_pos, val_neg.reshape(5, 2)))
    labels = np.r_[np.ones(4), np.zeros(4)]
    both = np.r_[full[("test", "pos")], full[("test", "neg")]]
    assert got["test_rocauc"] == pytest.approx(scores.roc_auc(both, labels))
    assert got["test_hits@3"] == pytest.approx(_ogb_hits(full[("test", "pos")], full[("test", "neg")], 3))
    train = np.r_[full[("train", "pos")], full[("train", "neg")]]
    bce = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.tensor(train), torch.tensor(np.r_[np.ones(8), np.zeros(8)])
    )
    assert got["loss"] == pytest.approx(float(bce))
