"""A training mode decides how steps are made; a strategy decides how attention is split.

One training loop (``trainer.py``) runs over the ``Step`` objects a ``Mode`` yields and evaluates on
the ``EvalBatch`` it gives. Three modes exist (``registry.py``): the whole graph each step, sampled
mini-batches, and isolated (Grappa) subgraphs. A mode owns its config section, its checks of the
rest of the run's settings and whether a checkpoint can be taken after a given epoch (the class
attributes below), so the config and the trainer never ask for a mode by name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from dsgraph.modes.sync import EveryStep


@dataclass(kw_only=True)
class Step:
    """One optimizer step's input on this rank."""

    epoch: int
    x: torch.Tensor  # [n, F] in the model's dtype, on the device
    attention: object  # GraphAttention over these n rows
    node_ids: torch.Tensor  # int64 [n], dataset ids (dropout masks)
    loss_rows: torch.Tensor | slice  # which rows carry the loss
    labels: torch.Tensor  # int64 [m], their labels
    global_count: float
    """The loss is sum(weights * losses) * W / global_count on every rank (ZeRO averages over W);
    sum(weights * losses) / global_count in a ``local`` step."""
    weights: torch.Tensor | None = None  # float32 [m]: per-row loss weights
    dropout_step: int | None = None  # the dropout key's step (None: the optimizer step count)
    reduce: bool = True
    """Sum loss and accuracy (and ``summed``) over ranks for the row; False: this rank's own."""
    summed: dict[str, float] = field(default_factory=dict)
    """Numbers the row reports summed over ranks (with ``reduce``)."""
    fields: dict = field(default_factory=dict)
    """Columns of this mode's own for the step's metrics row."""
    ends_epoch: bool = True
    local: bool = False
    """No gradient reduction: the rank steps on its own gradients (needs the mode's ``LocalSteps``)."""
    sync: bool = False
    """After this local step the ranks average their parameters (a super-epoch boundary)."""
    sync_weight: float = 0.0
    """This rank's weight in that average; the weights sum to 1 over the ranks."""
    input_bytes: int = 0
    """Bytes this rank sent to build the step's input (halo features), counted in ``comm_bytes``."""
    pairs: object = None
    """A link task's pairs (``dsgraph.comm.pairs.PairRows``): the model scores them, and ``labels``
    are their 1/0 targets; None: a node task (the model's rows ``loss_rows`` carry the loss)."""
    enc: dict[str, torch.Tensor] = field(default_factory=dict)
    """The rows' encoding arrays the model reads (``NodeData.enc``), on the device."""


@dataclass(kw_only=True)
class EvalBatch:
    """The whole-graph forward that evaluation runs on this rank."""

    x: torch.Tensor
    attention: object
    node_ids: torch.Tensor
    y: torch.Tensor
    masks: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # train, val, test
    reduce: bool = True
    """Sum counts over ranks (each rank holds its own rows); False: every rank holds every row."""
    dropout_step: int | None = None
    pairs: object = None
    """A link task's evaluation pairs (scored instead of the rows' outputs), None for a node task."""
    pair_sets: object = None
    """Which set (split, positive or negative) and position every one of those pairs has."""
    enc: dict[str, torch.Tensor] = field(default_factory=dict)


def joined(parts: list[tuple[torch.Tensor, EvalBatch]]) -> tuple[torch.Tensor, EvalBatch]:
    """One node-task evaluation from several forwards: (outputs, batch) pairs whose batches keep
    labels and masks only (``labels_of``), their rows stacked."""
    if len(parts) == 1:
        return parts[0]
    outputs, batches = zip(*parts)
    first = batches[0]
    masks = tuple(torch.cat([b.masks[i] for b in batches]) for i in range(3))
    return torch.cat(outputs), EvalBatch(
        x=None, attention=None, node_ids=None, y=torch.cat([b.y for b in batches]), masks=masks, reduce=first.reduce
    )


def labels_of(outputs: torch.Tensor, batch: EvalBatch) -> tuple[torch.Tensor, EvalBatch]:
    """What a node task's evaluation keeps of a forward: the outputs, labels and split masks of the
    rows in a split, the only rows its metrics read (a chunk of a sampled evaluation also holds its
    seeds' sampled neighbours, many times the seeds)."""
    keep = batch.masks[0] | batch.masks[1] | batch.masks[2]
    if bool(keep.all()):
        rows, masks = batch.y, batch.masks
    else:
        outputs, rows, masks = outputs[keep], batch.y[keep], tuple(m[keep] for m in batch.masks)
    return outputs, EvalBatch(x=None, attention=None, node_ids=None, y=rows, masks=masks, reduce=batch.reduce)


class Mode(ABC):
    """How a run makes its steps. Built on the CPU (data loaded, ``pg`` with its row split), then
    ``attach``-ed to the device once the engine exists (the model's dtype is known then)."""

    name: str = ""
    section: str | None = None
    """The key of its config section (``cfg.<section>``); None: it has no settings of its own."""
    Config: type | None = None
    """That section's dataclass (its ``FLAT_KEYS``: the keys' older top-level spellings)."""
    uses_strategy: bool = True
    """Whether its attention runs the configured strategy; False: every attention it builds is the
    plain op over a graph one rank holds whole (so it takes per-edge values whatever the strategy)."""
    pg = None  # the GraphParallelGroup with the run's row split
    num_features: int = 0
    num_classes: int = 0
    num_edge_features: int = 0
    """F_e of the edge features the model reads (0: it reads none)."""
    multilabel: bool = False
    """Labels are [N, T] 0/1 targets (NaN: missing), trained with BCE; num_classes is then T."""
    encoding_widths: dict[str, int] = {}
    """Width of each encoding array the rows carry (``NodeData.enc``): what the model's encoder reads."""

    @classmethod
    def check_config(cls, cfg) -> None:
        """Raises ValueError (naming the settings) when the rest of the run's config does not suit
        this mode; called when it is the run's mode."""

    @classmethod
    def can_checkpoint(cls, cfg, epoch: int) -> bool:
        """Whether a checkpoint after ``epoch`` resumes exactly (the ranks hold one model there)."""
        return True

    @classmethod
    def predict_memory(cls, cfg, dtype_bytes: int, world_size: int):
        """The run's peak per rank predicted before anything is loaded (``agp.run_memory.RunMemory``),
        or None where this mode is not predicted (the default)."""
        return None

    @classmethod
    def memory_alternatives(cls, cfg, predicted, dtype_bytes: int, world_size: int, limit_mb: float) -> list[str]:
        """Settings predicted to fit under ``limit_mb`` per rank (for the refusal and ``dsgraph plan``)."""
        return []

    @classmethod
    def fit_memory(cls, cfg, ds_config: dict, world_size: int):
        """(the config to run, a note for the log or ""): raises ValueError naming the prediction, the
        limit and what fits (``memory_alternatives``) when ``predict_memory`` is over the rank's
        limit; called on every CPU rank before its graph is loaded."""
        from dsgraph.agp.run_memory import dtype_bytes_of, local_ranks, memory_limit_mb, over_limit_message

        b = dtype_bytes_of(ds_config)
        predicted = cls.predict_memory(cfg, b, world_size)
        if predicted is None:
            return cfg, ""
        limit, source = memory_limit_mb(cfg, local_ranks(world_size))
        if predicted.total_mb > limit:
            fits = cls.memory_alternatives(cfg, predicted, b, world_size, limit)
            run = f"{predicted.strategy} on {world_size} ranks"
            raise ValueError(over_limit_message(predicted, run, limit, source, fits))
        return cfg, ""

    @abstractmethod
    def attach(self, device: torch.device, dtype: torch.dtype) -> None:
        """Moves this rank's data to ``device`` (features in ``dtype``) and builds its attention."""

    @abstractmethod
    def steps(self, start_epoch: int, end_epoch: int | None = None) -> Iterator[Step]:
        """Every step of epochs ``start_epoch`` .. ``end_epoch`` - 1 (default: the last epoch), in order."""

    @abstractmethod
    def eval_batch(self) -> EvalBatch:
        """The evaluation input (the whole graph, split as the mode evaluates it)."""

    def eval_batches(self) -> Iterator[EvalBatch]:
        """Evaluation's inputs, one forward each, their rows together this rank's share of the
        evaluation (default: ``eval_batch()`` alone; a mode out of core yields one per subgraph)."""
        yield self.eval_batch()

    @property
    def strategy_label(self) -> str:
        """The ``strategy`` column of metrics rows."""
        return self.name

    @property
    def train_attention(self):
        """The attention whose hooks (after_step, row_fields, drain_events) the loop calls."""
        return None

    def sync(self):
        """How the ranks keep one model during this mode's steps (``dsgraph.modes.sync``)."""
        return EveryStep()

    def step_fields(self, step: Step, summed: dict[str, float]) -> dict:
        """The row's columns from ``summed`` (already summed over ranks when the step reduces)."""
        return dict(summed)

    def epoch_line(self, epoch: int, rows: list[dict]) -> str:
        """The log line of an epoch from its step rows."""
        row = rows[-1]
        return f"epoch {epoch:4d}  loss {row['loss']:.4f}  train_acc {row['train_acc']:.3f}"

    def step_time_note(self, rows: list[dict]) -> str:
        row = rows[-1]
        return f"  step {row['step_time_s'] * 1e3:.0f} ms (comm {row['comm_time_s'] * 1e3:.0f} ms)"

    def close(self) -> None:
        """Stops background work (prefetch threads)."""
