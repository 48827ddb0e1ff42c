"""A node classification's metrics on the whole graph, computed exactly over every rank's rows.

Counting metrics (accuracy, F1) sum per-class counts over the ranks. Ranking metrics (ROC-AUC,
average precision) need every row's score: each rank sends the scores and labels of its split rows
to rank 0 (``gather_object``), rank 0 computes the metric once on all of them (``scores.py``) and
broadcasts the numbers, so no per-rank AUCs are ever averaged. Rank 0 then holds the split rows'
scores (one number per row and output), not the features or activations.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from dsgraph.graph.link_split import SPLITS
from dsgraph.tasks import scores
from dsgraph.tasks.base import metric_key, on_root

RANKING_METRICS = ("rocauc", "ap")  # need every row's score (gathered), not sums of counts


def _one_hot_parts(task, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(predicted, true, present) as bool [m, K] for per-class counts (K = C or T)."""
    if task.kind == "multilabel":
        present = ~torch.isnan(labels)
        return logits > 0, labels > 0.5, present
    classes = torch.arange(task.num_outputs, device=logits.device)
    pred = logits.argmax(1, keepdim=True) == classes
    true = labels.unsqueeze(1) == classes
    return pred, true, torch.ones_like(pred)


def _split_sums(task, logits, labels, want_counts: bool) -> torch.Tensor:
    """float64 [3 + 3K]: loss sum, correct, counted, then tp, fp, fn per class (with ``want_counts``)."""
    losses, correct, counted = task.losses(logits, labels)
    head = torch.stack([losses.sum().double(), correct.double(), counted.double()])
    if not want_counts:
        return head
    pred, true, present = _one_hot_parts(task, logits, labels)
    tp, fp, fn = (pred & true & present).sum(0), (pred & ~true & present).sum(0), (~pred & true & present).sum(0)
    return torch.cat([head, tp.double(), fp.double(), fn.double()])


def ranking_inputs(task, logits: torch.Tensor, labels: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(scores, labels) float64 [m, K] for ROC-AUC/AP: logit_1 - logit_0 of a binary task, softmax
    probabilities one-vs-rest of a multi-class task, the logits of a multi-label task (NaN labels
    stay missing)."""
    logits = logits.double()
    if task.kind == "binary":
        return (logits[:, 1] - logits[:, 0]).unsqueeze(1).cpu().numpy(), labels.double().unsqueeze(1).cpu().numpy()
    if task.kind == "multiclass":
        probs = F.softmax(logits, dim=1)
        return probs.cpu().numpy(), F.one_hot(labels, task.num_outputs).double().cpu().numpy()
    return logits.cpu().numpy(), labels.double().cpu().numpy()


def ranking_metric(metric: str, scores_nk: np.ndarray, labels_nk: np.ndarray) -> float:
    fn = scores.roc_auc if metric == "rocauc" else scores.average_precision
    if scores_nk.shape[0] == 0:
        return float("nan")
    return scores.mean_over_labels(fn, scores_nk, labels_nk)


def _gathered_ranking(metric: str, task, parts: list, reduce: bool) -> list[float]:
    """The ranking metric of each split, from every rank's (scores, labels) of that split."""
    return on_root(
        parts,
        lambda everyone: [
            ranking_metric(
                metric, np.concatenate([p[i][0] for p in everyone]), np.concatenate([p[i][1] for p in everyone])
            )
            for i in range(len(parts))
        ],
        reduce,
    )


def evaluate_splits(task, metric: str, logits: torch.Tensor, y: torch.Tensor, masks, reduce: bool, all_reduce) -> dict:
    """The eval row's numbers: ``loss`` (train rows), ``<split>_acc`` and, for another metric,
    ``<split>_<metric>`` for train, val and test. ``all_reduce(tensor)`` sums over ranks in place."""
    want_counts = metric.startswith("f1")
    sums = torch.stack([_split_sums(task, logits[m], y[m], want_counts) for m in masks])
    if reduce:
        all_reduce(sums)
    sums = sums.cpu().numpy()
    out = {"loss": float(sums[0, 0] / max(sums[0, 2], 1.0))}
    for name, row in zip(SPLITS, sums):
        out[f"{name}_acc"] = float(row[1] / max(row[2], 1.0))  # 0 for an empty split, as before
    key = metric_key(metric)
    if want_counts:
        k = task.num_outputs
        for name, row in zip(SPLITS, sums):
            out[f"{name}_{key}"] = scores.f1_from_counts(
                row[3 : 3 + k], row[3 + k : 3 + 2 * k], row[3 + 2 * k :], metric[3:]
            )
    elif metric in RANKING_METRICS:
        parts = [ranking_inputs(task, logits[m], y[m]) for m in masks]
        for name, value in zip(SPLITS, _gathered_ranking(metric, task, parts, reduce)):
            out[f"{name}_{key}"] = value
    return out
