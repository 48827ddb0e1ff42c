"""Node regression (``"task": "regression"``): a continuous target per node, ``y`` float [N] or [N, T].

The model has T outputs (1 for ``y`` [N]); the loss of a row is its squared error summed over the T
targets, and a step divides the sum by the global count of training (row, target) entries, so a
step's loss is the MSE over the training rows on any number of ranks. Metrics, each exact over all
ranks' rows (per split, the counts and sums of the targets and errors are all-reduced in float64,
then the squared deviations from the split's mean, in a second pass):

- ``mse`` (the default; lower is better): the mean of (prediction - target)^2 over all entries;
- ``mae`` (lower is better): the mean of |prediction - target|;
- ``r2`` (higher is better): 1 - SSE_t / SST_t per target t, averaged over the T targets
  (scikit-learn's ``r2_score`` with its default 'uniform_average').

Model selection keeps the epoch with the best validation value in the metric's own direction. The
``*_acc`` columns have no meaning here and are NaN. ``dsgraph predict`` exports ``predictions`` [N]
(or [N, T]), ``embeddings`` [N, d] and the split masks. Every node of train/val/test needs a finite
target (``graph/label_checks.py``); ``rmat:SCALE[:EF]:regression`` is a synthetic graph with one.
"""

from __future__ import annotations

import torch

from dsgraph.graph.link_split import SPLITS
from dsgraph.tasks.base import Export, Task, node_export

METRICS = ("mse", "mae", "r2")


def _as_columns(values: torch.Tensor) -> torch.Tensor:
    return values if values.ndim == 2 else values.unsqueeze(1)


def split_sums(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """float64 [4, T]: rows, sum of targets, squared errors and absolute errors per target."""
    pred, y = _as_columns(pred).double(), _as_columns(y).double()
    err = pred - y
    rows = torch.full((y.shape[1],), float(y.shape[0]), dtype=torch.float64, device=y.device)
    return torch.stack([rows, y.sum(0), (err * err).sum(0), err.abs().sum(0)])


def regression_values(sums: torch.Tensor, deviations: torch.Tensor) -> list[dict]:
    """Per split, {mse, mae, r2} from its ``split_sums`` [S, 4, T] and its targets' squared
    deviations from their mean [S, T], both summed over ranks; NaN for an empty split, and R2 NaN
    for a target that is constant on the split."""
    out = []
    for (rows, _, sse, sae), sst in zip(sums.cpu().tolist(), deviations.cpu().tolist()):
        n = rows[0] * len(rows)
        r2 = [1.0 - e / s if s > 0 else float("nan") for e, s in zip(sse, sst)]
        out.append(
            {
                "mse": sum(sse) / n if n else float("nan"),
                "mae": sum(sae) / n if n else float("nan"),
                "r2": sum(r2) / len(r2) if rows[0] else float("nan"),
            }
        )
    return out


class RegressionTask(Task):
    name = "regression"
    metrics = METRICS
    continuous_target = True

    @classmethod
    def check_metric(cls, metric: str | None) -> None:
        if metric is not None and metric not in METRICS:
            raise ValueError(
                f"'metric' of a regression task must be one of {', '.join(METRICS)} (or null: mse); got '{metric}'"
            )

    @classmethod
    def check_config(cls, cfg) -> None:
        """Mode 'full' and the dataset file: the sampled and isolated modes and the partition stores
        read class labels."""
        cls.check_metric(cfg.metric)
        if cfg.mode != "full":
            raise ValueError(f"'task': 'regression' trains in mode 'full' (every strategy), not mode '{cfg.mode}'")
        if cfg.partitions is not None:
            raise ValueError(
                "'task': 'regression' reads its targets from the dataset file, not a partition store; drop 'partitions'"
            )

    @property
    def default_metric(self) -> str:
        return "mse"

    def higher_is_better(self, metric: str) -> bool:
        return metric == "r2"

    def losses(self, pred: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(squared error per row [m] summed over its targets, NaN: no accuracy, entries counted)."""
        err = pred - _as_columns(y)
        nan = torch.tensor(float("nan"), device=pred.device)
        return (err * err).sum(1), nan, torch.tensor(err.numel(), device=pred.device)

    def evaluate(self, outputs: torch.Tensor, batch, metric: str, all_reduce) -> dict:
        """Every split's mse, mae and r2; ``loss`` is the training MSE (``module docstring``)."""
        sums = torch.stack([split_sums(outputs[m], batch.y[m]) for m in batch.masks])
        if batch.reduce:
            all_reduce(sums)
        mean = sums[:, 1] / sums[:, 0].clamp_min(1.0)  # [S, T]
        deviations = torch.stack(
            [((_as_columns(batch.y[m]).double() - mean[i]) ** 2).sum(0) for i, m in enumerate(batch.masks)]
        )
        if batch.reduce:
            all_reduce(deviations)
        out = {"loss": float("nan")}
        for split, values in zip(SPLITS, regression_values(sums, deviations)):
            out[f"{split}_acc"] = float("nan")
            out.update({f"{split}_{name}": value for name, value in values.items()})
        out["loss"] = out["train_mse"]
        return out

    def export(self, model, batch, data, pairs=None) -> Export:
        pred, emb = model.embed(batch.x, batch.attention, batch.node_ids, 0, batch.enc)
        pred = pred if batch.y.ndim == 2 else pred[:, 0]
        return node_export({"predictions": pred, "embeddings": emb}, batch, data.ranks.graph.num_nodes)
