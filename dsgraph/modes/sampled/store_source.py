"""What a rank of a sampled run from a partition store holds: its own part, memory-mapped.

The store relabels nodes (part r owns the relabelled rows [start_r, end_r)); the sampler keys its
draws by the dataset's original ids and every row keeps its in-neighbours in the dataset's order
(``partition.relabel``), so a rank that samples a row of its part draws what the whole-graph
sampler draws. The permutation (relabelled -> original id) stays memory-mapped: a rank reads its
own slice and the entries of the sources it samples. The training ids are the one thing gathered
from every rank: the global batches are cut from them, in original ids, as without a store.
"""

from __future__ import annotations

import os

import numpy as np

from dsgraph.graph.rank_errors import raise_if_any_rank_failed
from dsgraph.graph.store import LocalPart, load_part, load_permutation


class StoreView:
    """Part ``rank`` of the store ``store_dir`` (one part per rank) and the layout of the others."""

    def __init__(self, store_dir: str, rank: int, world_size: int, control):
        error = None
        try:
            self.part: LocalPart = load_part(store_dir, rank, world_size)
            self.perm = load_permutation(store_dir)  # memory-mapped, relabelled -> original
        except (ValueError, FileNotFoundError) as err:
            error = err
        raise_if_any_rank_failed(control, error)
        meta = self.part.meta
        if not isinstance(meta.get("num_classes"), int) or meta["num_classes"] < 1:
            raise ValueError(f"{os.path.join(store_dir, 'META.json')}: needs a positive integer 'num_classes'")
        self.store_dir, self.rank, self.world_size = store_dir, rank, world_size
        self.ends = np.array([end for _, end in meta["node_ranges"]], dtype=np.int64)
        self.own_ids = np.asarray(self.perm[self.part.start : self.part.end], dtype=np.int64)  # original ids
        self.num_features, self.num_classes = int(meta["num_features"]), int(meta["num_classes"])

    def owner_of(self, new_ids: np.ndarray) -> np.ndarray:
        """The rank owning each relabelled id."""
        return np.searchsorted(self.ends, new_ids, side="right")

    def original(self, new_ids: np.ndarray) -> np.ndarray:
        """Original ids of relabelled ids (reads those entries of the mapped permutation)."""
        return np.asarray(self.perm[np.asarray(new_ids, dtype=np.int64)], dtype=np.int64)

    def train_ids(self, control) -> tuple[np.ndarray, np.ndarray]:
        """(original ids of every rank's training rows, ascending; their relabelled ids): gathered."""
        rows = np.flatnonzero(np.asarray(self.part.train_mask))
        parts = control.allgather((self.own_ids[rows], rows + self.part.start))
        orig = np.concatenate([p[0] for p in parts]).astype(np.int64)
        new = np.concatenate([p[1] for p in parts]).astype(np.int64)
        order = np.argsort(orig, kind="stable")
        return orig[order], new[order]

    def eval_chunks(self, rows_per_chunk: int, control) -> list[np.ndarray]:
        """This rank's rows in a split (relabelled ids), cut into as many chunks as the rank with
        the most such rows needs (every rank runs the same number of forwards); a chunk may be empty."""
        p = self.part
        rows = np.flatnonzero(np.asarray(p.train_mask) | np.asarray(p.val_mask) | np.asarray(p.test_mask))
        most = max(control.allgather(int(rows.size)))
        count = max(1, -(-most // max(1, rows_per_chunk)))
        return np.array_split(rows + p.start, count)

    def answer_rows(self, new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Features (float32 [n, F]), labels (int64 [n]) and split masks (bool [n, 3]) of own rows."""
        local = np.asarray(new_ids, dtype=np.int64) - self.part.start
        p = self.part
        masks = np.stack([np.asarray(m[local]) for m in (p.train_mask, p.val_mask, p.test_mask)], axis=1)
        x = np.asarray(p.x[local], dtype=np.float32).reshape(local.size, self.num_features)
        return x, np.asarray(p.y[local], dtype=np.int64), masks
