"""The ``"link"`` section of the config: the settings of a link-prediction task (``"task": "link"``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dsgraph.models.link import DECODERS


@dataclass(kw_only=True, slots=True)
class LinkConfig:
    val_fraction: float = 0.05
    """Share of the graph's undirected edges held out for validation when the dataset fixes no
    split (no 'train_edges' array); removed from the graph the encoder reads, both directions."""
    test_fraction: float = 0.10
    """Share held out for testing, the same way (85/5/10 with the default val_fraction)."""
    split_seed: int | None = None
    """Seeds the random edge split and the evaluation negatives; null: the run's 'seed'."""
    negatives: int = 1
    """Training negatives per training edge, drawn uniformly over pairs of distinct nodes anew every
    step, keyed by (seed, epoch): the same pairs on any number of ranks."""
    decoder: str = "dot"
    """Pair decoder: 'dot' (<z_u, z_v>, the graph auto-encoder's) or 'mlp' (Linear -> ReLU -> Linear
    on z_u * z_v)."""
    decoder_hidden: int = 0
    """Hidden width of the 'mlp' decoder; 0: the embedding width."""
    embedding_dim: int = 64
    """Width d of the node embeddings: the encoder's output layer has d outputs instead of classes."""
    hits_at: list[int] = dataclasses.field(default_factory=lambda: [20, 50, 100])
    """The K of the Hits@K columns that evaluation reports (a 'metric' of 'hits@K' adds its K)."""

    FLAT_KEYS = {}
    """No older top-level spellings."""

    def __post_init__(self) -> None:
        for name in ("val_fraction", "test_fraction"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"'{name}' must be in [0, 1), got {getattr(self, name)}")
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ValueError(
                f"'val_fraction' + 'test_fraction' must leave training edges, got "
                f"{self.val_fraction} + {self.test_fraction}"
            )
        if self.negatives < 1 or self.embedding_dim < 1 or self.decoder_hidden < 0:
            raise ValueError("'negatives' and 'embedding_dim' must be >= 1 and 'decoder_hidden' >= 0")
        if self.decoder not in DECODERS:
            raise ValueError(f"'decoder' must be one of {', '.join(DECODERS)}; got {self.decoder!r}")
        if not self.hits_at or any(k < 1 for k in self.hits_at):
            raise ValueError(f"'hits_at' must be a non-empty list of integers >= 1, got {self.hits_at}")
