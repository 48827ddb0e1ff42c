"""Evaluation beats the heartbeat once per batch (``Trainer._eval_outputs``): a sampled evaluation of
rmat:24 ran 4,097 batches, longer than the 300 s heartbeat timeout as a whole, and the watchdog
stopped the job when only the evaluation's start was a beat."""

from types import SimpleNamespace

import torch

from dsgraph.modes.base import EvalBatch
from dsgraph.train.trainer import Trainer


def _batch(rows: int, first: int) -> EvalBatch:
    y = torch.arange(first, first + rows)
    keep = torch.ones(rows, dtype=torch.bool)
    return EvalBatch(x=torch.zeros(rows, 2), attention=None, node_ids=y, y=y, masks=(keep, keep, keep))


def test_every_evaluation_batch_is_a_heartbeat():
    beats, forwards = [], []
    batches = [_batch(3, 0), _batch(2, 3), _batch(4, 5)]

    def outputs(engine, batch, dropout_step):
        forwards.append(len(beats))  # beats seen before this batch's forward
        return batch.y[:, None].float()

    trainer = SimpleNamespace(
        mode=SimpleNamespace(eval_batches=lambda: iter(batches)),
        task=SimpleNamespace(outputs=outputs),
        heartbeat=beats.append,
    )
    out, joined = Trainer._eval_outputs(trainer, SimpleNamespace(global_steps=7), "evaluation after epoch 2")
    assert beats == ["evaluation after epoch 2"] * 4  # one before the first batch, one after each
    assert forwards == [1, 2, 3]
    assert out.squeeze(1).tolist() == list(range(9)) and joined.y.tolist() == list(range(9))
