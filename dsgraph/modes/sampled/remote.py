"""Sampling and feature fetch across the ranks of a partition store: the owner of a row draws.

A rank's seeds and their sampled neighbours may live in any part. At every hop a rank sends the
frontier's relabelled ids to their owners; an owner draws each row's in-neighbours from its part
exactly as ``NeighborSampler`` does (``draw_offsets`` keyed by the batch key and the node's
original id, over the row's in-edges in the dataset's order) and answers the drawn sources
(original and relabelled ids), so only the drawn edges cross, never whole rows. The union is
compacted as without a store, so the subgraph (in original ids) is the whole-graph sampler's.
Features, labels and split masks of the batch's nodes are then fetched from their owners' parts.

Every call makes the same collectives on every rank (3 exchanges per hop, 2 per fetch), whatever
it asks: a rank with nothing to ask still joins.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dsgraph.modes.sampled.exchange import Exchange, grouped
from dsgraph.modes.sampled.sampler import SampledSubgraph, compact, draw_offsets
from dsgraph.modes.sampled.store_source import StoreView


@dataclass
class Rows:
    """What the owners sent for some relabelled rows, in the order asked."""

    x: torch.Tensor  # float32 [n, F]
    y: torch.Tensor  # int64 [n]
    masks: torch.Tensor  # bool [n, 3]: train, val, test


class RemoteSampler:
    """Samples seed batches (original and relabelled ids) from a store's parts; see the module doc."""

    def __init__(self, view: StoreView, exchange: Exchange, fanouts: list[int], *, self_loops: bool = True):
        self.view, self.exchange = view, exchange
        self.fanouts = [int(f) for f in fanouts]
        self.self_loops = self_loops

    def sample(self, seeds: np.ndarray, seeds_new: np.ndarray, key: int) -> tuple[SampledSubgraph, np.ndarray]:
        """(the compact subgraph of ``seeds`` (original ids), the relabelled id of each of its nodes)."""
        seeds = np.asarray(seeds, dtype=np.int64)
        frontier, frontier_new = seeds, np.asarray(seeds_new, dtype=np.int64)
        mult, before = np.ones(seeds.size), seeds.size
        dst_parts, src_parts, new_parts = [], [], [frontier_new]
        for fanout in self.fanouts:
            counts, owner, src, src_new = self._draw(frontier, frontier_new, fanout, key)
            before += int(np.dot(mult, counts))
            dst_parts.append(frontier[owner])
            src_parts.append(src)
            new_parts.append(src_new)
            frontier, first, inverse = np.unique(src, return_index=True, return_inverse=True)
            frontier_new = src_new[first]
            mult = np.bincount(inverse, weights=mult[owner], minlength=frontier.size)
        src_all = np.concatenate(src_parts)
        sub = compact(
            seeds, np.concatenate(dst_parts), src_all, np.zeros(src_all.size, np.int64), before, self.self_loops
        )
        sub.edge_ids = None  # edge features are not read from a store
        orig = np.concatenate([seeds, src_all])
        uniq, first = np.unique(orig, return_index=True)
        new = np.concatenate(new_parts)[first]
        return sub, new[np.searchsorted(uniq, sub.node_ids.numpy())]

    def _draw(self, nodes: np.ndarray, nodes_new: np.ndarray, fanout: int, key: int):
        """(drawn count per node, the node (index into ``nodes``) of each drawn edge, its source's
        original id, its relabelled id): the owners draw."""
        order, send_counts = grouped(self.view.owner_of(nodes_new), self.exchange.world_size)
        asked, asked_counts = self.exchange.swap(nodes_new[order], send_counts)
        drawn, sources = self._answer_draw(asked, fanout, key)
        per_rank = np.add.reduceat(drawn, _starts(asked_counts)) if drawn.size else np.zeros(0, np.int64)
        flat_counts = _per_rank(per_rank, asked_counts)
        got, _ = self.exchange.swap(drawn, asked_counts)
        pairs, _ = self.exchange.swap(sources, flat_counts)
        counts = np.empty(nodes.size, dtype=np.int64)
        counts[order] = got
        return counts, np.repeat(order, got), pairs[:, 0], pairs[:, 1]

    def _answer_draw(self, asked: np.ndarray, fanout: int, key: int) -> tuple[np.ndarray, np.ndarray]:
        """For own rows ``asked`` (relabelled ids): (drawn count per row, int64 [k, 2] (original,
        relabelled) source ids grouped by row in ``asked`` order)."""
        part = self.view.part
        local = asked - part.start
        rowptr = part.rowptr
        starts = np.asarray(rowptr[local], dtype=np.int64)
        degrees = np.asarray(rowptr[local + 1], dtype=np.int64) - starts
        owner, offset = draw_offsets(self.view.own_ids[local], degrees, fanout, key)
        order = np.argsort(owner, kind="stable")
        owner, offset = owner[order], offset[order]
        src_new = np.asarray(part.col[starts[owner] + offset], dtype=np.int64)
        sources = np.stack([self.view.original(src_new), src_new], axis=1).reshape(-1, 2)
        return np.bincount(owner, minlength=asked.size).astype(np.int64), sources

    def fetch(self, new_ids: np.ndarray) -> Rows:
        """Features, labels and masks of relabelled rows ``new_ids``, from their owners' parts."""
        order, send_counts = grouped(self.view.owner_of(new_ids), self.exchange.world_size)
        asked, asked_counts = self.exchange.swap(np.asarray(new_ids, dtype=np.int64)[order], send_counts)
        x, y, masks = self.view.answer_rows(asked)
        packed = np.concatenate([y[:, None], masks.astype(np.int64)], axis=1)
        got_x, _ = self.exchange.swap(x, asked_counts)
        got_rest, _ = self.exchange.swap(packed, asked_counts)
        back = np.empty_like(order)
        back[order] = np.arange(order.size)
        return Rows(
            x=torch.from_numpy(got_x[back]),
            y=torch.from_numpy(got_rest[back, 0]),
            masks=torch.from_numpy(got_rest[back, 1:].astype(bool)),
        )


def _starts(counts: np.ndarray) -> np.ndarray:
    """Start of every non-empty group (for ``np.add.reduceat``)."""
    return (np.cumsum(counts) - counts)[counts > 0]


def _per_rank(sums_of_nonempty: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per-rank totals from the totals of the non-empty groups (empty groups: 0)."""
    out = np.zeros(counts.size, dtype=np.int64)
    out[counts > 0] = sums_of_nonempty
    return out
