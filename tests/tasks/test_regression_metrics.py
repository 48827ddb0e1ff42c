"""Node regression's metrics equal scikit-learn's, from sums over ranks (here: split into parts and
summed, as the all-reduce does), for targets [N] and [N, T]; float targets load only for it."""

import itertools

import numpy as np
import pytest
import torch

from dsgraph.graph import rmat_graph, save_npz
from dsgraph.graph.label_checks import SplitChoice
from dsgraph.graph.npz import load_npz
from dsgraph.modes.base import EvalBatch
from dsgraph.tasks.regression import RegressionTask

sklearn_metrics = pytest.importorskip("sklearn.metrics")


def _batch(y, masks) -> EvalBatch:
    n = y.shape[0]
    return EvalBatch(x=torch.zeros(n, 1), attention=None, node_ids=torch.arange(n), y=y, masks=masks, reduce=True)


@pytest.mark.parametrize("targets", [None, 3])
@pytest.mark.parametrize("ranks", [1, 3])
def test_mse_mae_r2_equal_sklearn_summed_over_ranks(targets, ranks):
    rng = np.random.default_rng(targets or 0)
    n = 200
    shape = (n,) if targets is None else (n, targets)
    y = rng.standard_normal(shape) * 3 + 1.5
    pred = y + rng.standard_normal(shape)
    split = rng.random(n)
    masks = [split < 0.5, (split >= 0.5) & (split < 0.7), split >= 0.7]
    task = RegressionTask()
    bounds = np.linspace(0, n, ranks + 1).astype(int)  # each "rank" holds a contiguous share of the rows
    rank_rows = [slice(a, b) for a, b in itertools.pairwise(bounds)]
    per_rank = []
    for rows in rank_rows:
        out = torch.from_numpy(pred[rows]).reshape(-1, targets or 1).float()
        batch = _batch(torch.from_numpy(y[rows]).float(), [torch.from_numpy(m[rows]) for m in masks])
        per_rank.append((out, batch))
    values = _evaluate_over(task, per_rank)
    for split_name, m in zip(("train", "val", "test"), masks):
        yt, pt = y[m].astype(np.float32).astype(np.float64), pred[m].astype(np.float32).astype(np.float64)
        assert values[f"{split_name}_mse"] == pytest.approx(sklearn_metrics.mean_squared_error(yt, pt), rel=1e-9)
        assert values[f"{split_name}_mae"] == pytest.approx(sklearn_metrics.mean_absolute_error(yt, pt), rel=1e-9)
        assert values[f"{split_name}_r2"] == pytest.approx(sklearn_metrics.r2_score(yt, pt), rel=1e-9)
        assert np.isnan(values[f"{split_name}_acc"])
    assert values["loss"] == values["train_mse"]


def _evaluate_over(task, per_rank):
    """``task.evaluate`` on every simulated rank, its all-reduce summing the ranks' tensors; every
    rank gets the same values (returned from rank 0)."""
    import threading

    barrier = threading.Barrier(len(per_rank))
    slots, results = {}, [None] * len(per_rank)
    lock = threading.Lock()

    def rank_main(r):
        calls = [0]

        def all_reduce(t):
            key = calls[0]
            calls[0] += 1
            with lock:
                slots.setdefault(key, []).append(t.clone())
            barrier.wait()
            t.copy_(torch.stack(slots[key]).sum(0))
            barrier.wait()

        out, batch = per_rank[r]
        results[r] = task.evaluate(out, batch, "mse", all_reduce)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(len(per_rank))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for other in results[1:]:
        assert other == pytest.approx(results[0], nan_ok=True)
    return results[0]


def test_an_empty_split_and_a_constant_target_give_nan():
    task = RegressionTask()
    y = torch.ones(6)
    masks = [
        torch.tensor([1, 1, 1, 0, 0, 0], dtype=torch.bool),
        torch.zeros(6, dtype=torch.bool),
        torch.tensor([0, 0, 0, 1, 1, 1], dtype=torch.bool),
    ]
    values = task.evaluate(torch.zeros(6, 1), _batch(y, masks), "mse", lambda t: None)
    assert values["train_mse"] == 1.0 and values["train_mae"] == 1.0 and np.isnan(values["train_r2"])
    assert np.isnan(values["val_mse"]) and np.isnan(values["val_r2"])


def test_losses_are_squared_errors_summed_over_targets():
    task = RegressionTask()
    pred = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    losses, correct, counted = task.losses(pred, torch.tensor([[0.0, 0.0], [1.0, 3.0]]))
    assert losses.tolist() == [5.0, 10.0] and torch.isnan(correct) and int(counted) == 4
    losses, _, counted = task.losses(pred[:, :1], torch.tensor([3.0, -1.0]))
    assert losses.tolist() == [4.0, 1.0] and int(counted) == 2


def test_continuous_targets_load_for_regression_only(tmp_path):
    graph = rmat_graph("rmat:8:8:regression", seed=2)
    assert graph.y.dtype == torch.float32 and graph.y.shape == (256,) and graph.num_classes == 1
    assert abs(float(graph.y.mean())) < 1e-5 and abs(float(graph.y.std()) - 1.0) < 1e-2
    path = str(tmp_path / "r.npz")
    save_npz(graph, path)
    assert torch.equal(load_npz(path, choice=SplitChoice(continuous=True)).y, graph.y)
    with pytest.raises(ValueError, match='a continuous target trains with "task": "regression"'):
        load_npz(path)
    y = graph.y.numpy().copy()
    y[int(graph.train_mask.nonzero()[0, 0])] = np.nan
    np.savez(str(tmp_path / "nan.npz"), **{**dict(np.load(path)), "y": y})
    with pytest.raises(ValueError, match="NaN or Inf at node .* which is in 'train_mask'"):
        load_npz(str(tmp_path / "nan.npz"), choice=SplitChoice(continuous=True))
