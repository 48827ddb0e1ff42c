"""Exact evaluation metrics on NumPy arrays: ROC-AUC, average precision, accuracy, F1, and the
ranking metrics of link prediction, Hits@K and MRR.

Pure functions (no torch.distributed): the trainer gathers a split's rows from every rank (or sums
their counts) and calls these once, so a metric never averages per-rank values. They equal
scikit-learn's on the same input (tested against it); scikit-learn is not needed to run them.

- ``roc_auc``: the Mann-Whitney statistic with tied scores given their average rank, which is
  exactly the area under the ROC curve by the trapezoid rule (``sklearn.metrics.roc_auc_score``).
- ``average_precision``: sum over distinct thresholds of (R_n - R_{n-1}) P_n
  (``sklearn.metrics.average_precision_score``; tied scores form one threshold).
- A split whose rows hold only one class has no ROC-AUC or average precision: the functions return
  NaN there (scikit-learn raises); ``mean_over_labels`` averages over the labels where both classes
  are present (OGB's ogbn-proteins rule) and is NaN only when no label has both.
- ``f1_from_counts``: micro and macro F1 from per-class true/false positive and false negative
  counts (summed over ranks); macro averages over the classes present in the labels or the
  predictions, as ``sklearn.metrics.f1_score`` does, with 0 for a class that is never right.
- ``hits_at_k`` and ``mrr`` follow OGB's link evaluators (``ogb.linkproppred.Evaluator``). With one
  shared set of negatives (ogbl-collab, -ppa, -ddi), Hits@K is the share of positives scored
  strictly above the K-th highest negative (1.0 when there are fewer than K negatives). With K
  negatives per positive (ogbl-citation2), each positive's rank among its own negatives is
  1 + (#higher + #higher-or-equal) / 2 (ties split evenly), MRR the mean of 1 / rank and Hits@K the
  share of ranks <= K. MRR against a shared set ranks each positive among all of it the same way.
"""

from __future__ import annotations

import numpy as np


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x``, ties sharing the mean of the ranks they span."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    first = np.r_[True, xs[1:] != xs[:-1]]
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], xs.size]
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = ((starts + ends + 1) / 2.0)[group]
    return ranks


def _binary_inputs(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    labels = np.asarray(labels).reshape(-1)
    if scores.shape != labels.shape:
        raise ValueError(f"scores have {scores.size} entries but labels have {labels.size}")
    if not np.isfinite(scores).all():
        raise ValueError("scores contain NaN or Inf (the model diverged?); no ROC-AUC or AP can be computed")
    if labels.size and not np.isin(labels, (0, 1)).all():
        raise ValueError("binary labels must be 0 or 1")
    return scores, labels.astype(bool)


def roc_auc(scores, labels) -> float:
    """ROC-AUC of one binary task (labels 0/1, higher score = more positive); NaN if only one class."""
    scores, positive = _binary_inputs(scores, labels)
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = _average_ranks(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def average_precision(scores, labels) -> float:
    """Average precision of one binary task; NaN if no row is positive or no row is negative."""
    scores, positive = _binary_inputs(scores, labels)
    n_pos = int(positive.sum())
    if n_pos == 0 or n_pos == positive.size:
        return float("nan")
    order = np.argsort(-scores, kind="mergesort")
    s, hit = scores[order], positive[order]
    ends = np.r_[np.flatnonzero(s[1:] != s[:-1]), s.size - 1]  # last row of each distinct threshold
    tps = np.cumsum(hit)[ends].astype(np.float64)
    precision = tps / (ends + 1)
    recall = tps / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def mean_over_labels(metric, scores_nt, labels_nt) -> float:
    """Mean of ``metric`` (``roc_auc`` or ``average_precision``) over the columns of [n, T] arrays;
    labels are 0/1, NaN marks a missing one. Columns with one class (or none) present are left out;
    NaN if none is left."""
    scores_nt = np.asarray(scores_nt, dtype=np.float64)
    labels_nt = np.asarray(labels_nt, dtype=np.float64)
    values = []
    for t in range(labels_nt.shape[1]):
        present = ~np.isnan(labels_nt[:, t])
        value = metric(scores_nt[present, t], labels_nt[present, t])
        if not np.isnan(value):
            values.append(value)
    return float(np.mean(values)) if values else float("nan")


def f1_from_counts(tp, fp, fn, average: str) -> float:
    """F1 from per-class counts [C]: 'micro' (one F1 over all counts) or 'macro' (the mean of the
    per-class F1 over classes with tp + fp + fn > 0); NaN when there is nothing to count."""
    tp, fp, fn = (np.asarray(v, dtype=np.float64) for v in (tp, fp, fn))
    if average == "micro":
        tp, fp, fn = tp.sum(keepdims=True), fp.sum(keepdims=True), fn.sum(keepdims=True)
    elif average != "macro":
        raise ValueError(f"F1 average must be 'micro' or 'macro', got {average!r}")
    seen = tp + fp + fn > 0
    if not seen.any():
        return float("nan")
    return float(np.mean(2 * tp[seen] / (2 * tp[seen] + fp[seen] + fn[seen])))


def _ranks_among(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """float64 [n]: each positive's rank among the negatives, OGB's way (ties count half)."""
    pos = np.asarray(pos, dtype=np.float64).reshape(-1)
    neg = np.asarray(neg, dtype=np.float64)
    if neg.ndim == 2:  # K negatives per positive
        higher = (neg > pos[:, None]).sum(1)
        at_least = (neg >= pos[:, None]).sum(1)
    else:
        ordered = np.sort(neg.reshape(-1))
        higher = ordered.size - np.searchsorted(ordered, pos, side="right")
        at_least = ordered.size - np.searchsorted(ordered, pos, side="left")
    return 0.5 * (higher + at_least) + 1.0


def hits_at_k(pos, neg, k: int) -> float:
    """Hits@K of positive scores [n] against negatives: shared [m], or [n, K'] per positive; NaN
    without positives."""
    pos = np.asarray(pos, dtype=np.float64).reshape(-1)
    neg = np.asarray(neg, dtype=np.float64)
    if pos.size == 0:
        return float("nan")
    if neg.ndim == 2:
        return float(np.mean(_ranks_among(pos, neg) <= k))
    if neg.size < k:
        return 1.0
    kth = np.partition(neg, neg.size - k)[neg.size - k]  # the K-th highest negative
    return float(np.mean(pos > kth))


def mrr(pos, neg) -> float:
    """Mean reciprocal rank of positive scores [n] among negatives: shared [m], or [n, K] per
    positive; NaN without positives."""
    pos = np.asarray(pos, dtype=np.float64).reshape(-1)
    if pos.size == 0:
        return float("nan")
    return float(np.mean(1.0 / _ranks_among(pos, neg)))
