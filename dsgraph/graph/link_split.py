"""Edge splits of a link-prediction task, made so that no held-out edge reaches the encoder.

A ``LinkSplit`` holds, in the dataset's node ids, the positive pairs of each split (train, val,
test) and the fixed negative pairs that evaluate each split. The message-passing graph that the
encoder reads is built from the training positives only, in both directions
(``message_edges``); ``check`` refuses a split in which a validation or test pair appears among the
training pairs in either direction, so a held-out edge cannot be read by attention.

- ``random_split``: the standard protocol of the graph auto-encoder (Kipf and Welling, 2016) and of
  PyG's ``RandomLinkSplit``: the graph's undirected edges, each once and without self loops, are
  shuffled with the seed; ``floor(m * test_fraction)`` become test, ``floor(m * val_fraction)``
  validation, the rest training. Every evaluated split gets as many negatives as positives: pairs
  of distinct nodes that are no edge of the graph, drawn uniformly, val and test disjoint.
- Fixed splits from a file (``link_data.py``): OGB-style ``train_edges``, ``val_edges``,
  ``test_edges`` [m, 2], optional shared negatives ``val_neg_edges``/``test_neg_edges`` [k, 2] or
  per-positive negative destinations ``val_neg_dst``/``test_neg_dst`` [m, K] (ogbl-citation2's
  layout: negative k of positive i is the pair (source of i, dst[i, k])).

Pairs are unordered for the leakage check and the negatives (the decoders are symmetric); a pair
is keyed by ``min * N + max`` (N < 2^31, so keys fit int64).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SPLITS = ("train", "val", "test")
NEGATIVE_STREAM = 0x4C4E4547  # seeds the evaluation negatives apart from the split's shuffle


def pair_keys(pairs: np.ndarray, num_nodes: int) -> np.ndarray:
    """int64 [m]: one key per unordered pair of a [m, 2] array (either orientation gives the same key)."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return np.minimum(pairs[:, 0], pairs[:, 1]) * num_nodes + np.maximum(pairs[:, 0], pairs[:, 1])


def undirected_pairs(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> np.ndarray:
    """int64 [m, 2]: the distinct unordered pairs of an edge list (u < v, self loops dropped),
    ascending by key."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    keep = src != dst
    keys = np.unique(pair_keys(np.stack([src[keep], dst[keep]], axis=1), num_nodes))
    return np.stack([keys // num_nodes, keys % num_nodes], axis=1)


def _contains(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """bool [k]: which ``keys`` are in ``sorted_keys`` (ascending)."""
    if sorted_keys.size == 0:
        return np.zeros(keys.shape, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.size - 1)
    return sorted_keys[at] == keys


def sample_absent_pairs(num_nodes: int, count: int, exclude_keys: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """int64 [count, 2]: distinct unordered pairs of distinct nodes, uniform among those whose key
    is not in ``exclude_keys`` (ascending), in the order drawn."""
    possible = num_nodes * (num_nodes - 1) // 2 - exclude_keys.size
    if count > possible:
        raise ValueError(
            f"cannot draw {count:,} negative pairs: the graph of {num_nodes:,} nodes has only {possible:,} "
            "pairs that are not edges"
        )
    chosen = np.zeros(0, dtype=np.int64)
    while chosen.size < count:
        draw = max(2 * (count - chosen.size), 1024)
        u = rng.integers(0, num_nodes, draw)
        v = (u + rng.integers(1, max(num_nodes, 2), draw)) % max(num_nodes, 1)  # v != u, uniform over the others
        keys = pair_keys(np.stack([u, v], axis=1), num_nodes)
        keys = keys[~_contains(exclude_keys, keys)]
        everything = np.concatenate([chosen, keys])
        _, first = np.unique(everything, return_index=True)
        chosen = everything[np.sort(first)]  # distinct, in the order drawn
    chosen = chosen[:count]
    return np.stack([chosen // num_nodes, chosen % num_nodes], axis=1)


@dataclass(frozen=True)
class LinkSplit:
    """The pairs of a link task in dataset ids: ``positives[s]`` [m_s, 2] and ``negatives[s]``
    [k_s, 2] for s in train, val, test (the train negatives are the fixed ones that evaluation
    scores the training split with; training draws new negatives every step)."""

    num_nodes: int
    positives: dict[str, np.ndarray]
    negatives: dict[str, np.ndarray]
    per_positive: dict[str, int] = field(default_factory=dict)
    """split -> K when its negatives are K per positive, grouped in the positives' order (MRR ranks
    each positive among its own K); absent or 0: one shared set for the whole split."""

    def message_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) int64: every training pair in both directions, the encoder's whole graph."""
        train = self.positives["train"]
        return np.concatenate([train[:, 0], train[:, 1]]), np.concatenate([train[:, 1], train[:, 0]])

    def check(self, source: str) -> None:
        """Ranges and shapes of every array; refuses held-out pairs that are training pairs too."""
        n = self.num_nodes
        for kind, sets in (("positive", self.positives), ("negative", self.negatives)):
            for name in SPLITS:
                pairs = sets[name]
                if pairs.ndim != 2 or pairs.shape[1] != 2:
                    raise ValueError(f"{source}: {name} {kind} pairs must be [m, 2], got shape {pairs.shape}")
                if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
                    raise ValueError(f"{source}: a {name} {kind} pair names a node outside [0, {n})")
        for name, k in self.per_positive.items():
            if k and self.negatives[name].shape[0] != k * self.positives[name].shape[0]:
                raise ValueError(
                    f"{source}: {name} has {self.positives[name].shape[0]} positives but "
                    f"{self.negatives[name].shape[0]} negatives, not {k} per positive"
                )
        train = np.unique(pair_keys(self.positives["train"], n))
        for name in ("val", "test"):
            leaked = int(_contains(train, pair_keys(self.positives[name], n)).sum())
            if leaked:
                raise ValueError(
                    f"{source}: {leaked:,} {name} edge(s) are also training edges (in one direction or "
                    "the other); held-out edges must not be in the graph the encoder reads"
                )

    def sizes(self) -> dict[str, int]:
        """'<split>_pos' / '<split>_neg' -> pair count (for the log line)."""
        return {
            **{f"{s}_pos": int(self.positives[s].shape[0]) for s in SPLITS},
            **{f"{s}_neg": int(self.negatives[s].shape[0]) for s in SPLITS},
        }


def random_split(pairs: np.ndarray, num_nodes: int, val_fraction: float, test_fraction: float, seed: int) -> LinkSplit:
    """The seeded split of ``pairs`` (``undirected_pairs`` of the graph) with one negative per
    evaluated positive (see the module docstring)."""
    rng = np.random.default_rng(seed)
    m = pairs.shape[0]
    n_test, n_val = int(np.floor(m * test_fraction)), int(np.floor(m * val_fraction))
    if m - n_test - n_val < 1 or (val_fraction > 0 and n_val < 1) or (test_fraction > 0 and n_test < 1):
        raise ValueError(
            f"a graph of {m:,} undirected edges is too small for a {val_fraction:g}/{test_fraction:g} val/test split"
        )
    order = rng.permutation(m)
    test, val, train = pairs[order[:n_test]], pairs[order[n_test : n_test + n_val]], pairs[order[n_test + n_val :]]
    return with_negatives(num_nodes, {"train": train, "val": val, "test": test}, {}, seed)


def with_negatives(
    num_nodes: int,
    positives: dict[str, np.ndarray],
    given: dict[str, np.ndarray],
    seed: int,
    per_positive: dict[str, int] | None = None,
) -> LinkSplit:
    """A ``LinkSplit`` whose splits without ``given`` negatives get one drawn negative per positive:
    pairs that are no positive of any split, distinct across the drawn splits."""
    rng = np.random.default_rng([seed, NEGATIVE_STREAM])
    known = np.unique(np.concatenate([pair_keys(positives[s], num_nodes) for s in SPLITS]))
    negatives = dict(given)
    drawn = [s for s in ("val", "test", "train") if s not in given]  # the held-out sets first: their draws never change
    for name in drawn:
        pairs = sample_absent_pairs(num_nodes, positives[name].shape[0], known, rng)
        negatives[name] = pairs
        known = np.union1d(known, pair_keys(pairs, num_nodes))
    return LinkSplit(
        num_nodes=num_nodes, positives=positives, negatives=negatives, per_positive=dict(per_positive or {})
    )
