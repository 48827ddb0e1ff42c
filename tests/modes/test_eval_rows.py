"""What a node task's evaluation keeps of each forward (``modes.base.labels_of``): the rows in a
split, so a chunked evaluation does not keep its chunks' sampled neighbours, with the same metrics."""

import torch

from dsgraph.modes.base import EvalBatch, joined, labels_of
from dsgraph.tasks.registry import get_task


def _batch(y, masks):
    return EvalBatch(x=None, attention=None, node_ids=None, y=y, masks=masks, reduce=False)


def test_rows_outside_every_split_are_dropped_and_the_metrics_do_not_change():
    g = torch.Generator().manual_seed(0)
    parts, whole = [], []
    for n in (40, 25, 60):  # three chunks: a few seeds in a split, the rest sampled neighbours
        outputs, y = torch.randn(n, 5, generator=g), torch.randint(0, 5, (n,), generator=g)
        split = torch.randint(0, 6, (n,), generator=g)  # 0, 1, 2: train, val, test; else in no split
        masks = tuple(split == i for i in range(3))
        parts.append(labels_of(outputs, _batch(y, masks)))
        whole.append((outputs, _batch(y, masks)))
        kept_out, kept = parts[-1]
        in_split = int((split < 3).sum())
        assert kept_out.shape == (in_split, 5) and kept.y.shape == (in_split,)
        assert torch.equal(kept_out, outputs[split < 3]) and torch.equal(kept.y, y[split < 3])
        assert all(torch.equal(kept.masks[i], masks[i][split < 3]) for i in range(3))
    task = get_task("node")()
    task.set_data(5, multilabel=False)
    never = lambda t: None  # noqa: E731 (reduce is off)
    trimmed = task.evaluate(*joined(parts), "accuracy", never)
    untrimmed = task.evaluate(*joined(whole), "accuracy", never)
    assert trimmed == untrimmed


def test_a_forward_whose_rows_are_all_in_splits_is_kept_as_it_is():
    outputs, y = torch.randn(6, 3), torch.arange(6) % 3
    masks = (torch.tensor([1, 1, 0, 0, 0, 0], dtype=torch.bool),) + (
        torch.tensor([0, 0, 1, 1, 0, 0], dtype=torch.bool),
    )
    masks += (~(masks[0] | masks[1]),)
    kept_out, kept = labels_of(outputs, _batch(y, masks))
    assert kept_out is outputs and kept.y is y
