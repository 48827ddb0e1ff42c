"""Multi-label node tasks ([N, T] targets with missing labels): BCE over present pairs, mean
ROC-AUC; the loss on 2 ranks equals 1 rank for every strategy (the loss divides by present pairs)."""

import numpy as np
import pytest

from dsgraph.graph import rmat_graph, save_npz
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, make_trainer

STRATEGIES = ("ag", "a2a", "halo", "ag_ring")


def _train(rank, world, tmp):
    out = {}
    for strategy in STRATEGIES if world > 1 else ("ag",):
        trainer = make_trainer(
            tmp,
            ds_config(stage=2),
            dataset=f"{tmp}/ml.npz",
            strategy=strategy,
            epochs=3,
            eval_every=1,
            dropout=0.0,
            input_dropout=0.0,
        )
        before = trainer.evaluate(-1)
        rows = [trainer.train_epoch(epoch) for epoch in range(3)]
        out[strategy] = {"loss": [r["loss"] for r in rows], "before": before, "after": trainer.evaluate(2)}
    if rank == 0:
        dump(tmp, f"ml{world}.json", out)


@pytest.mark.slow
def test_multilabel_trains_on_every_strategy_like_one_rank(tmp_path):
    save_npz(rmat_graph("rmat:8:8:labels=16", seed=1), str(tmp_path / "ml.npz"))
    run(_train, 1, tmp_path)
    run(_train, 2, tmp_path)
    one, two = load(tmp_path, "ml1.json")["ag"], load(tmp_path, "ml2.json")
    assert one["before"]["metric"] == "rocauc" and 0.0 <= one["before"]["val_rocauc"] <= 1.0
    assert one["after"]["train_rocauc"] > one["before"]["train_rocauc"]
    for strategy, got in two.items():
        assert np.allclose(got["loss"], one["loss"], atol=1e-5), (strategy, got["loss"], one["loss"])
        assert np.isclose(got["after"]["val_rocauc"], one["after"]["val_rocauc"], atol=1e-5), strategy


def _sampled(rank, world, tmp):
    trainer = make_trainer(
        tmp,
        ds_config(stage=2),
        dataset=f"{tmp}/ml.npz",
        strategy="sampled",
        epochs=3,
        eval_every=1,
        dropout=0.0,
        input_dropout=0.0,
        sampled=dict(fanouts=[4, 4], batch_size=32),
    )
    before = trainer.evaluate(-1)
    rows = [trainer.train_epoch(epoch) for epoch in range(3)]
    if rank == 0:
        dump(
            tmp,
            f"sampled{world}.json",
            {"loss": [r["loss"] for r in rows], "before": before, "after": trainer.evaluate(2)},
        )


@pytest.mark.slow
def test_multilabel_trains_in_sampled_mode_like_one_rank(tmp_path):
    """The loss divides by the present pairs of the whole global batch, so 2 ranks equal 1."""
    save_npz(rmat_graph("rmat:8:8:labels=16", seed=1), str(tmp_path / "ml.npz"))
    run(_sampled, 1, tmp_path)
    run(_sampled, 2, tmp_path)
    one, two = load(tmp_path, "sampled1.json"), load(tmp_path, "sampled2.json")
    assert one["after"]["train_rocauc"] > one["before"]["train_rocauc"]
    assert np.allclose(two["loss"], one["loss"], atol=1e-5), (two["loss"], one["loss"])


def test_sampled_batches_divide_by_the_global_batch_present_pairs():
    """Each rank's loss divisor is the global batch's present (seed, label) pairs, the same on every rank."""
    import torch

    from dsgraph.modes.sampled import BatchBuilder, FeatureStore, NeighborSampler

    graph = rmat_graph("rmat:8:8:labels=16", seed=1)
    labels = graph.y.clone()
    labels[::3, ::2] = float("nan")
    builder = BatchBuilder(NeighborSampler(graph.rowptr, graph.col, [2]), FeatureStore(graph.x), labels, seed=0)
    batch = np.arange(0, 40, dtype=np.int64)
    want = int((~torch.isnan(labels[:40])).sum())
    assert 0 < want < 40 * labels.shape[1]
    for rank in (0, 1):
        built = builder.build(0, 0, batch, rank, 2)
        assert built.global_count == want and built.global_size == 40 and built.y.shape == (20, 16)
