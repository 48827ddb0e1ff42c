"""A link task's batch in the full-graph mode: the encoder's graph over the ranks, this rank's pairs,
the negatives.

Start-up (every rank, the same result): the dataset's edges are split (``graph/link_split.py``);
the encoder's graph holds the training edges only, in both directions, and is split over the
ranks by the configured strategy like any graph (``GraphOnRanks``). A pair is scored by the rank
that owns its first node (in the relabelled rows of the split); its second node's embedding comes
from its owner (``dsgraph.comm.pairs``). The fixed pairs of this rank (training positives, and the
evaluation pairs of every split) ride in the rank graph's ``derived`` structures, so they move to
the device with the graph.

Every step scores all training positives and ``negatives`` x as many negatives: pairs of distinct
nodes drawn uniformly in dataset ids from a generator keyed by (seed, epoch), the same pairs on any
number of ranks, each rank keeping those whose first node it owns. The loss is the BCE summed over
this rank's pairs, times W over the global pair count, as the node loss is scaled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dsgraph.comm.pairs import PairRows
from dsgraph.graph.file_loading import dataset_path
from dsgraph.graph.link_data import load_link_split, message_graph
from dsgraph.graph.link_split import SPLITS, LinkSplit
from dsgraph.graph.rank_errors import raise_if_any_rank_failed
from dsgraph.modes.base import EvalBatch, Step

PAIRS = "link_pairs"  # the key of this rank's pairs in RankGraph.derived
TRAIN_NEGATIVES = 0x54524E47  # seeds the training negatives apart from everything else
EVAL_SETS = tuple((split, kind) for split in SPLITS for kind in ("pos", "neg"))  # set ids of the evaluation pairs


@dataclass(frozen=True)
class LinkPairs:
    """This rank's fixed pairs as global rows (it owns every first node)."""

    train_u: torch.Tensor
    """int64 [m]: the training positives."""
    train_v: torch.Tensor
    eval_u: torch.Tensor
    """int64 [k]: every evaluation pair (positives and negatives of train, val, test)."""
    eval_v: torch.Tensor
    eval_set: torch.Tensor
    """int64 [k]: which of ``EVAL_SETS`` each evaluation pair belongs to."""
    eval_index: torch.Tensor
    """int64 [k]: its position in that set (the dataset's order of the set)."""

    def to(self, device: torch.device) -> LinkPairs:
        return LinkPairs(**{name: getattr(self, name).to(device) for name in self.__dataclass_fields__})


@dataclass(frozen=True)
class PairSets:
    """What evaluation needs to put every rank's scores back in order: the set and position of
    each of this rank's pairs, and the global size of every set."""

    set_id: torch.Tensor
    index: torch.Tensor
    sizes: dict[tuple[str, str], int]
    per_positive: dict[str, int]
    """split -> K when its negatives come K per positive (MRR ranks each positive among its own)."""


def rows_of(control, node_ids: np.ndarray, num_nodes: int) -> np.ndarray:
    """int64 [N]: the global row of every dataset id (the inverse of the split's relabelling)."""
    perm = np.concatenate(control.allgather(np.asarray(node_ids, dtype=np.int64)))
    if perm.size != num_nodes:
        raise ValueError(f"the ranks' rows cover {perm.size} of {num_nodes} nodes")
    rows = np.empty(num_nodes, dtype=np.int64)
    rows[perm] = np.arange(num_nodes)
    return rows


def load_split(cfg, control, heartbeat) -> tuple[np.ndarray, LinkSplit, str]:
    """(features, the edge split, the dataset file) on every rank; any rank's failure stops all."""
    path = dataset_path(cfg.dataset, cfg.seed, control, heartbeat)
    link, error, loaded = cfg.link, None, (None, None)
    try:
        seed = cfg.seed if link.split_seed is None else link.split_seed
        loaded = load_link_split(path, val_fraction=link.val_fraction, test_fraction=link.test_fraction, seed=seed)
    except (ValueError, FileNotFoundError) as err:
        error = err
    raise_if_any_rank_failed(control, error)
    return loaded[0], loaded[1], path


class LinkOnRanks:
    """A link task's data on this rank: the encoder's graph split by the strategy (``ranks``), the
    pairs it scores, and its training steps and evaluation input."""

    def __init__(self, cfg, pg, control, log, heartbeat, graph_on_ranks):
        """``graph_on_ranks(graph, outputs)``: the encoder's graph split over the ranks (a ``GraphOnRanks``)."""
        self.cfg = cfg
        heartbeat("start-up: splitting the edges")
        x, self.split, path = load_split(cfg, control, heartbeat)
        graph = message_graph(x, self.split, path)
        self.ranks = graph_on_ranks(graph.with_self_loops() if cfg.adds_self_loops else graph, cfg.link.embedding_dim)
        self.pg, self.num_nodes = self.ranks.pg, graph.num_nodes
        self.row_of = rows_of(control, self.ranks.graph.nodes.node_ids.numpy(), self.num_nodes)
        self.train_total = int(self.split.positives["train"].shape[0])
        self.ranks.graph.derived[PAIRS] = self._fixed_pairs()
        sizes = self.split.sizes()
        log(
            "link split ("
            + ", ".join(f"{k} {v:,}" for k, v in sizes.items())
            + f"); encoder graph {graph.num_edges:,} "
            f"directed training edges; {cfg.link.negatives} training negative(s) per edge and step"
        )
        self.eval_pairs = None

    def _mine(self, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(u rows, v rows, positions) of the pairs (dataset ids [m, 2]) whose first node this rank owns."""
        start, end = self.pg.rows
        u, v = self.row_of[pairs[:, 0]], self.row_of[pairs[:, 1]]
        index = np.flatnonzero((u >= start) & (u < end))
        return u[index], v[index], index

    def _fixed_pairs(self) -> LinkPairs:
        train_u, train_v, _ = self._mine(self.split.positives["train"])
        parts = []
        for code, (split, kind) in enumerate(EVAL_SETS):
            pairs = (self.split.positives if kind == "pos" else self.split.negatives)[split]
            u, v, index = self._mine(pairs)
            parts.append((u, v, np.full(index.size, code, dtype=np.int64), index))
        t = lambda i: torch.from_numpy(np.concatenate([p[i] for p in parts]).astype(np.int64))  # noqa: E731
        return LinkPairs(
            train_u=torch.from_numpy(train_u),
            train_v=torch.from_numpy(train_v),
            eval_u=t(0),
            eval_v=t(1),
            eval_set=t(2),
            eval_index=t(3),
        )

    def negatives(self, epoch: int) -> np.ndarray:
        """int64 [M, 2]: the training negatives of ``epoch`` in dataset ids (every rank draws all)."""
        n, count = self.num_nodes, self.train_total * self.cfg.link.negatives
        rng = np.random.default_rng([self.cfg.seed, epoch, TRAIN_NEGATIVES])
        u = rng.integers(0, n, count)
        v = (u + rng.integers(1, max(n, 2), count)) % n  # a node other than u, uniformly
        return np.stack([u, v], axis=1)

    def step(self, epoch: int) -> Step:
        graph = self.ranks.graph
        pairs: LinkPairs = graph.derived[PAIRS]
        neg_u, neg_v, _ = self._mine(self.negatives(epoch))
        device = graph.device
        u = torch.cat([pairs.train_u, torch.from_numpy(neg_u).to(device)])
        v = torch.cat([pairs.train_v, torch.from_numpy(neg_v).to(device)])
        labels = torch.cat([torch.ones(pairs.train_u.numel(), device=device), torch.zeros(neg_u.size, device=device)])
        nodes = graph.nodes
        return Step(
            epoch=epoch,
            x=nodes.x,
            attention=self.ranks.attention,
            node_ids=nodes.node_ids,
            loss_rows=slice(None),
            labels=labels,
            global_count=self.train_total * (1 + self.cfg.link.negatives),
            dropout_step=epoch,
            pairs=PairRows(u, v, self.pg),
            enc=nodes.enc,
        )

    def eval_batch(self) -> EvalBatch:
        """The whole graph and every evaluation pair (the pairs' exchange plan is kept between evaluations)."""
        graph = self.ranks.graph
        pairs: LinkPairs = graph.derived[PAIRS]
        if self.eval_pairs is None:
            self.eval_pairs = PairRows(pairs.eval_u, pairs.eval_v, self.pg)
        sizes = {
            (split, kind): int((self.split.positives if kind == "pos" else self.split.negatives)[split].shape[0])
            for split, kind in EVAL_SETS
        }
        sets = PairSets(
            set_id=pairs.eval_set, index=pairs.eval_index, sizes=sizes, per_positive=dict(self.split.per_positive)
        )
        batch = self.ranks.eval_batch()
        batch.pairs, batch.pair_sets = self.eval_pairs, sets
        return batch

    def pairs_of(self, edges: np.ndarray) -> tuple[PairRows, np.ndarray]:
        """This rank's share of ``edges`` (dataset ids [m, 2]) to score, and their positions."""
        u, v, index = self._mine(edges)
        device = self.ranks.graph.device
        return PairRows(torch.from_numpy(u).to(device), torch.from_numpy(v).to(device), self.pg), index
