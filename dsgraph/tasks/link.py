"""Link prediction (``"task": "link"``): the Graph Transformer encodes node embeddings and a decoder
scores node pairs (``dsgraph.models.link``), trained with binary cross-entropy on 1/0 targets.

Its settings are the ``link`` section (``link_config.py``); its batch, the pairs and their negatives
over the ranks, is ``link_pairs.py``; its evaluation scores every split's pairs once and computes
ROC-AUC (its default metric), AP, MRR and Hits@K exactly on rank 0 (``link_metrics.py``).
``dsgraph predict`` exports ``embeddings`` [N, d] and, with ``--edges FILE``, the pairs and their
``scores`` [m] (logits).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from dsgraph.graph.encodings import get_encoding
from dsgraph.graph.link_data import edge_file
from dsgraph.models.link import LinkPredictor, make_decoder
from dsgraph.tasks.base import Export, Task, transformer
from dsgraph.tasks.link_config import LinkConfig
from dsgraph.tasks.link_metrics import evaluate_links
from dsgraph.tasks.link_pairs import LinkOnRanks

METRICS = ("rocauc", "ap", "mrr", "hits@K")  # hits@K with an integer K >= 1


def hits_k(metric: str) -> int | None:
    """K of a 'hits@K' metric, else None; ValueError for 'hits@' without an integer K >= 1."""
    if not metric.startswith("hits@"):
        return None
    k = metric[len("hits@") :]
    if not k.isdigit() or int(k) < 1:
        raise ValueError(f"metric '{metric}': Hits@K needs an integer K >= 1, for example hits@50")
    return int(k)


class LinkTask(Task):
    name = "link"
    metrics = METRICS
    section = "link"
    Config = LinkConfig

    @classmethod
    def check_metric(cls, metric: str | None) -> None:
        if metric is None or metric in METRICS[:3] or hits_k(metric) is not None:
            return
        raise ValueError(
            f"'metric' of a link task must be one of {', '.join(METRICS)} (or null: rocauc); got '{metric}'"
        )

    @classmethod
    def check_config(cls, cfg) -> None:
        """Mode 'full', the dataset file (not a partition store), no stored encodings (they would
        leak the held-out edges) and no edge features."""
        cls.check_metric(cfg.metric)
        if cfg.mode != "full":
            raise ValueError(
                f"'task': 'link' trains in mode 'full' (every strategy); mode '{cfg.mode}' samples or isolates "
                "node rows, not edges, and is not supported for link prediction"
            )
        if cfg.partitions is not None:
            raise ValueError(
                "'task': 'link' splits the dataset's edges at start-up, so it reads the dataset file, not "
                "a partition store; drop 'partitions'"
            )
        stored = [name for name in cfg.model.encodings if get_encoding(name).stored]
        if stored:
            raise ValueError(
                f"'task': 'link' cannot read the stored encodings {', '.join(map(repr, stored))}: "
                "`dsgraph encode` computes them over every edge, the held-out ones included, which "
                "would leak them to the encoder; drop them from 'model.encodings' (the counted ones, such as "
                "'degree', count the training edges only and may stay)"
            )
        if cfg.model.reads_edges:
            raise ValueError(
                "task 'link' does not read edge features (its message graph is rebuilt from the "
                'training pairs, without them); set model.edge_features to "none"'
            )

    @classmethod
    def pairs_to_score(cls, path: str | None) -> np.ndarray | None:
        return None if path is None else edge_file(path)

    @property
    def default_metric(self) -> str:
        return "rocauc"

    def set_data(self, num_outputs: int, multilabel: bool) -> None:
        self.num_outputs = 1  # one score per pair

    def hits(self, metric: str) -> list[int]:
        """The K of the Hits@K columns: the link section's, and the metric's own."""
        k = hits_k(metric)
        return sorted(set(self.cfg.link.hits_at) | ({k} if k else set()))

    def rank_data(self, cfg, pg, control, log, heartbeat, graph_on_ranks) -> LinkOnRanks:
        return LinkOnRanks(cfg, pg, control, log, heartbeat, graph_on_ranks)

    def build_model(self, in_dim: int, num_outputs: int, encoding_widths=None, edge_dim: int = 0) -> LinkPredictor:
        """The encoder (output width: the embedding width) with its decoder; ``num_outputs`` is not read."""
        link = self.cfg.link
        encoder = transformer(self.cfg, in_dim, link.embedding_dim, encoding_widths, edge_dim)
        return LinkPredictor(
            encoder, make_decoder(link.decoder, link.embedding_dim, link.decoder_hidden or link.embedding_dim)
        )

    def losses(self, scores: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Scores [m] of pairs, labels 1/0 [m]: BCE per pair, pairs on the right side of 0, pairs."""
        losses = F.binary_cross_entropy_with_logits(scores, labels, reduction="none")
        return losses, ((scores > 0) == (labels > 0.5)).sum(), torch.tensor(labels.numel(), device=scores.device)

    def evaluate(self, outputs: torch.Tensor, batch, metric: str, all_reduce) -> dict:
        return evaluate_links(outputs, batch.pair_sets, self.hits(metric), batch.reduce)

    def export(self, model, batch, data, pairs: np.ndarray | None = None) -> Export:
        """``embeddings`` [N, d], and with ``pairs`` [m, 2] (dataset ids) the pairs and their ``scores``
        [m] (logits; sigmoid gives the probability), each rank scoring those whose first node it owns."""
        z = model(batch.x, batch.attention, batch.node_ids, 0, batch.enc)
        n = data.ranks.graph.num_nodes
        out = Export(
            {"embeddings": ((n, z.shape[1]), "float32")},
            [(batch.node_ids.cpu().numpy(), {"embeddings": z.float().cpu().numpy()})],
        )
        out.described = f"embeddings [{n}, {z.shape[1]}]"
        if pairs is None:
            return out
        if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
            raise ValueError(f"--edges names a node outside [0, {n}) (pairs are dataset node ids)")
        out.shapes.update(edges=((pairs.shape[0], 2), "int64"), scores=((pairs.shape[0],), "float32"))
        rows, index = data.pairs_of(pairs)
        out.parts.append((index, {"edges": pairs[index], "scores": model.score(z, rows).float().cpu().numpy()}))
        out.described += f", edges [{pairs.shape[0]}, 2], scores [{pairs.shape[0]}]"
        return out
