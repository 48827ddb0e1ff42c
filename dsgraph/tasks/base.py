"""What a task is: the one object the trainer, inference and predict hold for what a run learns.

A task class says its name, its config section (``section``, ``Config``), what it needs of the rest
of the run (``check_config``), which metrics it reports and which way each one improves; a task
object builds the model (its head or decoder), brings its batch to the full-graph mode
(``rank_data``: node rows or node pairs), computes the loss of a step, the metrics of an evaluation
(exactly over all ranks) and what ``dsgraph predict`` exports. ``registry.py`` lists the tasks;
adding one is a module with its ``Task`` subclass plus one line there (docs/DESIGN.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as tdist

from dsgraph.graph.layout import MASKS
from dsgraph.models import GraphTransformer
from dsgraph.modes.base import EvalBatch, Step


def metrics_help(tasks: dict) -> str:
    """'node: accuracy, ...; link: ...' of the registered ``tasks`` (name -> class), for --help."""
    return "; ".join(f"{name}: {', '.join(cls.metrics)}" for name, cls in tasks.items())


def metric_key(metric: str) -> str:
    """The column stem of a metric: 'acc' for accuracy (val_acc, test_acc), else its own name."""
    return "acc" if metric == "accuracy" else metric


def on_root(part, compute, reduce: bool = True):
    """``compute([every rank's part])``, computed once on rank 0 from the parts gathered there and
    broadcast to every rank (``reduce`` False or one process: ``compute([part])`` here)."""
    if reduce and tdist.is_initialized() and tdist.get_world_size() > 1:
        rank = tdist.get_rank()
        everyone = [None] * tdist.get_world_size() if rank == 0 else None
        tdist.gather_object(part, everyone, dst=0)
        out = [compute(everyone) if rank == 0 else None]
        tdist.broadcast_object_list(out, src=0)
        return out[0]
    return compute([part])


def transformer(cfg, in_dim: int, outputs: int, encoding_widths: dict[str, int] | None = None, edge_dim: int = 0):
    """The run's GraphTransformer with ``outputs`` outputs, initialised from the run's seed (the same
    parameters on every rank)."""
    torch.manual_seed(cfg.seed)
    return GraphTransformer(
        in_dim,
        outputs,
        hidden=cfg.hidden,
        heads=cfg.heads,
        layers=cfg.layers,
        ffn_mult=cfg.ffn_mult,
        dropout=cfg.dropout,
        input_dropout=cfg.input_dropout,
        attention_dropout=cfg.attention_dropout,
        seed=cfg.seed,
        options=cfg.model,
        encoding_widths=encoding_widths,
        edge_dim=edge_dim,
    )


@dataclass
class Export:
    """What ``dsgraph predict`` writes from this rank: every array's global shape and dtype, and
    the parts this rank holds (dataset rows or pair positions, and the values at them)."""

    shapes: dict[str, tuple[tuple[int, ...], str]]
    parts: list[tuple[np.ndarray, dict[str, np.ndarray]]] = field(default_factory=list)
    described: str = ""


def node_export(outputs: dict[str, torch.Tensor], batch: EvalBatch, num_nodes: int) -> Export:
    """The export of a node task: ``outputs`` (name -> this rank's rows [n] or [n, K]) and the split
    masks, every array in the dataset's node order."""
    arrays = {name: value.float().cpu().numpy() for name, value in outputs.items()}
    arrays.update({name: mask.cpu().numpy() for name, mask in zip(MASKS, batch.masks)})
    shapes = {name: ((num_nodes, *value.shape[1:]), str(value.dtype)) for name, value in arrays.items()}
    described = ", ".join(f"{name} {list(shape)}" for name, (shape, _) in shapes.items() if name not in MASKS)
    return Export(shapes, [(batch.node_ids.cpu().numpy(), arrays)], f"{described}, masks [{num_nodes}]")


class NodeRows:
    """A node task's data in the full-graph mode: the graph split over the ranks by the strategy
    (``ranks``, a ``GraphOnRanks``); every step trains on this rank's training rows."""

    def __init__(self, ranks):
        self.ranks = ranks

    def step(self, epoch: int) -> Step:
        nodes = self.ranks.graph.nodes
        return Step(
            epoch=epoch,
            x=nodes.x,
            attention=self.ranks.attention,
            node_ids=nodes.node_ids,
            loss_rows=nodes.train_mask,
            labels=nodes.y[nodes.train_mask],
            global_count=self.ranks.train_count,
            dropout_step=epoch,
            enc=nodes.enc,
        )

    def eval_batch(self) -> EvalBatch:
        return self.ranks.eval_batch()


class Task(ABC):
    """One task; the object is built from the run's config (``cfg``), ``set_data`` tells it the data's
    output width once the mode has loaded it."""

    name: str = ""
    section: str | None = None
    """The key of its config section (None: it has no settings)."""
    Config: type | None = None
    """The section's dataclass (with ``FLAT_KEYS``, older top-level spellings of its keys)."""
    continuous_target: bool = False
    """Its labels 'y' are a continuous target (float [N] or [N, T]), not class ids."""
    metrics: tuple[str, ...] = ()
    """The metrics 'metric' may name (for help texts; ``check_metric`` decides)."""

    def __init__(self, cfg=None):
        self.cfg = cfg
        self.kind, self.num_outputs = self.name, 0

    @classmethod
    @abstractmethod
    def check_metric(cls, metric: str | None) -> None:
        """ValueError unless ``metric`` (None: the task's default) is one of the task's metrics."""

    @classmethod
    def check_config(cls, cfg) -> None:
        """ValueError (message without the 'dsgraph config: ' prefix) for what the task needs of the
        rest of the run: its metric, and what the subclass adds (mode, partitions, encodings...)."""
        cls.check_metric(cfg.metric)

    @classmethod
    def pairs_to_score(cls, path: str | None) -> np.ndarray | None:
        """The node pairs ``dsgraph predict --edges FILE`` asks to score; only a task that scores
        pairs takes them."""
        if path is not None:
            raise ValueError('--edges scores node pairs; it needs a link task ("task": "link" in the config)')
        return None

    @property
    @abstractmethod
    def default_metric(self) -> str:
        """The metric of model selection when the config names none."""

    def metric(self, configured: str | None) -> str:
        return configured or self.default_metric

    def higher_is_better(self, metric: str) -> bool:
        """Whether a larger value of ``metric`` is a better model (model selection, early stop)."""
        return True

    def set_data(self, num_outputs: int, multilabel: bool) -> None:
        """The mode's data: classes, labels or targets per node, and whether 'y' is [N, T]."""
        self.num_outputs = num_outputs

    def describe(self) -> str:
        return f"task: {self.kind} ({self.num_outputs} outputs)"

    def rank_data(self, cfg, pg, control, log, heartbeat, graph_on_ranks):
        """This rank's data for the full-graph mode: ``ranks`` (the graph split by the strategy),
        ``step(epoch)`` and ``eval_batch()``. ``graph_on_ranks(graph, outputs)`` splits a graph over
        the ranks (None, None: the run's dataset, and the model's output width from its labels)."""
        return NodeRows(graph_on_ranks(None, None))

    def build_model(self, in_dim: int, num_outputs: int, encoding_widths=None, edge_dim: int = 0) -> torch.nn.Module:
        """The model, with ``num_outputs`` outputs per node (the data's classes, labels or targets)."""
        return transformer(self.cfg, in_dim, num_outputs, encoding_widths, edge_dim)

    def outputs(self, model, batch, step: int) -> torch.Tensor:
        """The model's fp32 outputs on an evaluation batch (collective: every rank runs it)."""
        pairs = () if batch.pairs is None else (batch.pairs,)
        return model(batch.x, batch.attention, batch.node_ids, step, batch.enc, *pairs).float()

    @abstractmethod
    def losses(self, outputs: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(loss per row [m] summed over its targets, correct predictions, predictions counted)."""

    @abstractmethod
    def evaluate(self, outputs: torch.Tensor, batch: EvalBatch, metric: str, all_reduce) -> dict:
        """The eval row's numbers: ``loss``, ``<split>_acc`` and ``<split>_<metric key>`` for train, val
        and test, exact over all ranks (``all_reduce(tensor)`` sums in place; collective)."""

    def published(self, dataset: str) -> str | None:
        """A line with the published results for ``dataset`` under this task, printed at a run's end;
        None where there are none (``tasks/published.py`` holds node classification's)."""
        return None

    @abstractmethod
    def export(self, model, batch: EvalBatch, data, pairs: np.ndarray | None = None) -> Export:
        """What ``dsgraph predict`` writes from this rank (``data``: the mode's ``rank_data``)."""
