"""A link task's evaluation: every split's pairs scored once, the metrics computed exactly on rank 0.

Each rank scores the evaluation pairs whose first node it owns (``link_pairs.py``)
and sends the set, position and score of each to rank 0 (``base.on_root``), which puts
every set back in the dataset's order, computes the metrics once (``scores.py``) and broadcasts
them: no per-rank value is ever averaged. Rank 0 then holds one float per evaluation pair.

Columns, for each split s of train, val, test: ``s_acc`` (share of pairs on the right side of
score 0, that is of probability 0.5), ``s_rocauc`` and ``s_ap`` (positives against the split's
negatives), ``s_mrr`` and ``s_hits@K`` (OGB's conventions, ``scores.py``); ``loss`` is the BCE
over the training positives and their fixed negatives.
"""

from __future__ import annotations

import numpy as np
import torch

from dsgraph.graph.link_split import SPLITS
from dsgraph.tasks import scores
from dsgraph.tasks.base import on_root
from dsgraph.tasks.link_pairs import EVAL_SETS, PairSets


def assemble(parts: list, sizes: dict) -> dict[tuple[str, str], np.ndarray]:
    """(split, kind) -> float64 scores in the set's order, from every rank's (set ids, positions, scores)."""
    out = {}
    for code, key in enumerate(EVAL_SETS):
        values = np.full(sizes[key], np.nan)
        seen = 0
        for set_id, index, score in parts:
            mine = set_id == code
            values[index[mine]] = score[mine]
            seen += int(mine.sum())
        assert seen == sizes[key], f"{key}: {seen} scores for {sizes[key]} pairs"
        out[key] = values
    return out


def split_values(split: str, pos: np.ndarray, neg: np.ndarray, per_positive: int, hits_at: list[int]) -> dict:
    """The columns of one split from its positives' and negatives' scores."""
    labels = np.r_[np.ones(pos.size), np.zeros(neg.size)]
    both = np.r_[pos, neg]
    ranked = neg.reshape(pos.size, per_positive) if per_positive else neg
    out = {
        f"{split}_acc": float(((both > 0) == (labels > 0.5)).mean()) if both.size else 0.0,
        f"{split}_rocauc": scores.roc_auc(both, labels),
        f"{split}_ap": scores.average_precision(both, labels),
        f"{split}_mrr": scores.mrr(pos, ranked),
    }
    out.update({f"{split}_hits@{k}": scores.hits_at_k(pos, ranked, k) for k in hits_at})
    return out


def link_values(sets: dict, per_positive: dict[str, int], hits_at: list[int]) -> dict:
    """Every column (module docstring) from the scores of every set."""
    pos, neg = sets[("train", "pos")], sets[("train", "neg")]
    bce = np.r_[np.logaddexp(0.0, -pos), np.logaddexp(0.0, neg)]
    out = {"loss": float(bce.mean()) if bce.size else 0.0}
    for split in SPLITS:
        out.update(split_values(split, sets[(split, "pos")], sets[(split, "neg")], per_positive.get(split, 0), hits_at))
    return out


def evaluate_links(scores_m: torch.Tensor, sets: PairSets, hits_at: list[int], reduce: bool = True) -> dict:
    """The eval row's numbers from the scores [m] of this rank's evaluation pairs (collective)."""
    part = (sets.set_id.cpu().numpy(), sets.index.cpu().numpy(), scores_m.detach().double().cpu().numpy())
    return on_root(
        part, lambda everyone: link_values(assemble(everyone, sets.sizes), sets.per_positive, hits_at), reduce
    )
