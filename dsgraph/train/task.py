"""What a node task is, from its labels: its loss, its default metric and its training accuracy.

- ``multiclass``: ``y`` [N] int class ids, C > 2 outputs, softmax cross-entropy; default metric
  accuracy.
- ``binary``: ``y`` [N] int in {0, 1}, two outputs, cross-entropy; default metric ROC-AUC (the score
  of a row is logit_1 - logit_0, which orders rows as the softmax probability of class 1 does).
- ``multilabel``: ``y`` [N, T] float 0/1 with NaN for a missing label, T outputs, binary
  cross-entropy with logits over the present (node, label) pairs; default metric the mean ROC-AUC
  over labels.
- ``link``: scores [m] of node pairs (``dsgraph.models.link``) with 1/0 targets, binary
  cross-entropy with logits; default metric ROC-AUC; also AP, MRR and Hits@K (``hits@K``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

METRICS = ("accuracy", "rocauc", "ap", "f1_micro", "f1_macro")
RANKING_METRICS = ("rocauc", "ap")  # need every row's score (gathered), not sums of counts
LINK_METRICS = ("rocauc", "ap", "mrr", "hits@K")  # a link task's; hits@K with an integer K >= 1
TASKS = ("node", "link")


def hits_k(metric: str) -> int | None:
    """K of a 'hits@K' metric, else None; ValueError for 'hits@' without an integer K >= 1."""
    if not metric.startswith("hits@"):
        return None
    k = metric[len("hits@"):]
    if not k.isdigit() or int(k) < 1:
        raise ValueError(f"metric '{metric}': Hits@K needs an integer K >= 1, for example hits@50")
    return int(k)


def check_metric(task: str, metric: str | None) -> None:
    """ValueError unless ``metric`` (None: the task's default) is one of ``task``'s metrics."""
    if metric is None:
        return
    if task == "link":
        if metric in LINK_METRICS[:3] or hits_k(metric) is not None:
            return
        raise ValueError(f"'metric' of a link task must be one of {', '.join(LINK_METRICS)} (or null: rocauc); got '{metric}'")
    if metric not in METRICS:
        raise ValueError(f"'metric' must be one of {', '.join(METRICS)} (or null: per task); got '{metric}'")


def metric_key(metric: str) -> str:
    """The column stem of a metric: 'acc' for accuracy (val_acc, test_acc), else its own name."""
    return "acc" if metric == "accuracy" else metric


@dataclass(frozen=True, slots=True)
class Task:
    kind: str  # 'multiclass' | 'binary' | 'multilabel' | 'link'
    num_outputs: int

    @classmethod
    def of(cls, num_classes: int, multilabel: bool = False) -> "Task":
        """``num_classes``: classes of a single-label task, or labels T of a multi-label one."""
        if multilabel:
            return cls("multilabel", num_classes)
        return cls("binary" if num_classes == 2 else "multiclass", num_classes)

    @classmethod
    def link(cls) -> "Task":
        """Link prediction: one score per pair."""
        return cls("link", 1)

    @property
    def default_metric(self) -> str:
        return "accuracy" if self.kind == "multiclass" else "rocauc"

    def metric(self, configured: str | None) -> str:
        return configured or self.default_metric

    def losses(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(loss per row [m] summed over its present labels, correct predictions, predictions
        counted): rows' class predictions for single-label tasks, present (row, label) pairs for
        multi-label ones."""
        if self.kind == "link":  # scores [m] of pairs, labels 1/0 [m]
            losses = F.binary_cross_entropy_with_logits(logits, labels, reduction="none")
            return losses, ((logits > 0) == (labels > 0.5)).sum(), torch.tensor(labels.numel(), device=logits.device)
        if self.kind != "multilabel":
            losses = F.cross_entropy(logits, labels, reduction="none")
            return losses, (logits.argmax(1) == labels).sum(), torch.tensor(labels.numel(), device=logits.device)
        present = ~torch.isnan(labels)
        target = torch.where(present, labels, torch.zeros_like(labels))
        pairs = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
        losses = torch.where(present, pairs, torch.zeros_like(pairs)).sum(1)
        correct = ((logits > 0) == (target > 0.5)) & present
        return losses, correct.sum(), present.sum()
