"""Node classification (``"task": "node"``), its kind read from the labels: its loss, its default
metric, its training accuracy and its evaluation (``node_metrics.py``).

- ``multiclass``: ``y`` [N] int class ids, C > 2 outputs, softmax cross-entropy; default metric
  accuracy.
- ``binary``: ``y`` [N] int in {0, 1}, two outputs, cross-entropy; default metric ROC-AUC (the score
  of a row is logit_1 - logit_0, which orders rows as the softmax probability of class 1 does).
- ``multilabel``: ``y`` [N, T] float 0/1 with NaN for a missing label, T outputs, binary
  cross-entropy with logits over the present (node, label) pairs; default metric the mean ROC-AUC
  over labels.

``dsgraph predict`` exports ``logits`` [N, C], ``embeddings`` [N, d] (the input of the output layer)
and the split masks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dsgraph.tasks.base import Export, Task, node_export
from dsgraph.tasks.node_metrics import evaluate_splits
from dsgraph.tasks.published import published_line

METRICS = ("accuracy", "rocauc", "ap", "f1_micro", "f1_macro")


class NodeTask(Task):
    name = "node"
    metrics = METRICS

    @classmethod
    def check_metric(cls, metric: str | None) -> None:
        if metric is not None and metric not in METRICS:
            raise ValueError(f"'metric' must be one of {', '.join(METRICS)} (or null: per task); got '{metric}'")

    def set_data(self, num_outputs: int, multilabel: bool) -> None:
        """``num_outputs``: classes of a single-label task, or labels T of a multi-label one."""
        self.num_outputs = num_outputs
        self.kind = "multilabel" if multilabel else "binary" if num_outputs == 2 else "multiclass"

    @property
    def default_metric(self) -> str:
        return "accuracy" if self.kind == "multiclass" else "rocauc"

    def losses(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(loss per row [m] summed over its present labels, correct predictions, predictions
        counted): rows' class predictions for single-label tasks, present (row, label) pairs for
        multi-label ones."""
        if self.kind != "multilabel":
            losses = F.cross_entropy(logits, labels, reduction="none")
            return losses, (logits.argmax(1) == labels).sum(), torch.tensor(labels.numel(), device=logits.device)
        present = ~torch.isnan(labels)
        target = torch.where(present, labels, torch.zeros_like(labels))
        pairs = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
        losses = torch.where(present, pairs, torch.zeros_like(pairs)).sum(1)
        correct = ((logits > 0) == (target > 0.5)) & present
        return losses, correct.sum(), present.sum()

    def evaluate(self, outputs: torch.Tensor, batch, metric: str, all_reduce) -> dict:
        return evaluate_splits(self, metric, outputs, batch.y, batch.masks, batch.reduce, all_reduce)

    def published(self, dataset: str) -> str | None:
        return published_line(dataset)

    def export(self, model, batch, data, pairs=None) -> Export:
        logits, emb = model.embed(batch.x, batch.attention, batch.node_ids, 0, batch.enc)
        return node_export({"logits": logits, "embeddings": emb}, batch, data.ranks.graph.num_nodes)
