"""dsgraph's metrics equal scikit-learn's on random predictions, with ties and one-class splits."""

import numpy as np
import pytest
import torch

from dsgraph.tasks import scores
from dsgraph.tasks.node import NodeTask
from dsgraph.tasks.node_metrics import evaluate_splits, ranking_inputs

sklearn_metrics = pytest.importorskip("sklearn.metrics")


def node_task(num_classes: int) -> NodeTask:
    task = NodeTask()
    task.set_data(num_classes, multilabel=False)
    return task


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("levels", [None, 3, 10])  # continuous scores, or few distinct values (many ties)
def test_binary_rocauc_and_ap_equal_sklearn(seed, levels):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    labels = rng.integers(0, 2, n)
    labels[:2] = [0, 1]
    s = rng.standard_normal(n) + labels * rng.random()
    if levels is not None:
        s = np.round(s * levels / 4) / levels
    assert scores.roc_auc(s, labels) == pytest.approx(sklearn_metrics.roc_auc_score(labels, s), abs=1e-12)
    assert scores.average_precision(s, labels) == pytest.approx(
        sklearn_metrics.average_precision_score(labels, s), abs=1e-12
    )


def test_one_class_split_is_nan_not_a_crash():
    s = np.array([0.1, 0.4, 0.4])
    assert np.isnan(scores.roc_auc(s, np.zeros(3)))
    assert np.isnan(scores.roc_auc(s, np.ones(3)))
    assert np.isnan(scores.average_precision(s, np.zeros(3)))
    assert np.isnan(scores.roc_auc(np.zeros(0), np.zeros(0)))
    with pytest.raises(ValueError, match="NaN"):
        scores.roc_auc(np.array([np.nan, 1.0]), np.array([0, 1]))


def test_multilabel_mean_rocauc_skips_missing_and_one_class_labels():
    rng = np.random.default_rng(1)
    n, t = 300, 6
    y = rng.integers(0, 2, (n, t)).astype(float)
    y[:, 4] = 1.0  # one class only: left out
    y[rng.random((n, t)) < 0.2] = np.nan  # missing labels
    s = np.round(rng.standard_normal((n, t)), 1)  # ties
    want = []
    for j in range(t):
        present = ~np.isnan(y[:, j])
        if len(np.unique(y[present, j])) == 2:
            want.append(sklearn_metrics.roc_auc_score(y[present, j], s[present, j]))
    assert len(want) == t - 1
    assert scores.mean_over_labels(scores.roc_auc, s, y) == pytest.approx(np.mean(want), abs=1e-12)
    assert np.isnan(scores.mean_over_labels(scores.roc_auc, s[:, 4:5], y[:, 4:5]))


@pytest.mark.parametrize("seed", range(4))
def test_f1_and_accuracy_equal_sklearn(seed):
    rng = np.random.default_rng(seed)
    c, n = 5, 200
    labels = rng.integers(0, c - 1, n)  # class 4 never true...
    logits = torch.from_numpy(rng.standard_normal((n, c)))
    logits[:, 3] -= 10  # ... class 3 rarely predicted
    pred = logits.argmax(1).numpy()
    masks = [torch.ones(n, dtype=torch.bool)] * 3
    y = torch.from_numpy(labels)
    for metric, want in (
        ("f1_micro", sklearn_metrics.f1_score(labels, pred, average="micro")),
        ("f1_macro", sklearn_metrics.f1_score(labels, pred, average="macro", zero_division=0)),
    ):
        got = evaluate_splits(node_task(c), metric, logits, y, masks, reduce=False, all_reduce=None)
        assert got[f"test_{metric}"] == pytest.approx(want, abs=1e-12)
        assert got["test_acc"] == pytest.approx(sklearn_metrics.accuracy_score(labels, pred), abs=1e-12)


def test_multiclass_and_binary_rocauc_from_logits_equal_sklearn():
    rng = np.random.default_rng(0)
    n = 120
    logits = torch.from_numpy(rng.standard_normal((n, 4)))
    y = torch.from_numpy(np.r_[np.arange(4), rng.integers(0, 4, n - 4)])
    s, lab = ranking_inputs(node_task(4), logits, y)
    want = sklearn_metrics.roc_auc_score(y.numpy(), torch.softmax(logits, 1).numpy(), multi_class="ovr")
    assert scores.mean_over_labels(scores.roc_auc, s, lab) == pytest.approx(want, abs=1e-12)
    yb = y % 2
    masks = [torch.ones(n, dtype=torch.bool)] * 3
    got = evaluate_splits(node_task(2), "rocauc", logits[:, :2], yb, masks, reduce=False, all_reduce=None)
    probs = torch.softmax(logits[:, :2], 1)[:, 1].numpy()
    assert got["val_rocauc"] == pytest.approx(sklearn_metrics.roc_auc_score(yb.numpy(), probs), abs=1e-12)
