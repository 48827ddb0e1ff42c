"""The ``"sampled"`` section of the config: mini-batch training's own settings."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

FEATURE_DTYPE_NAMES = ("float32", "bfloat16")


@dataclass(kw_only=True, slots=True)
class SampledConfig:
    fanouts: list[int] = dataclasses.field(default_factory=lambda: [10, 10])
    """In-neighbours drawn per node at hop 1..L, one entry per layer."""
    batch_size: int = 1024
    """Seed nodes per global mini-batch (split evenly over the ranks)."""
    prefetch_depth: int = 4
    """Mini-batches prepared ahead by a background thread (0: prepare in the loop)."""
    cache_fraction: float = 0.1
    """Share of nodes (the most often sampled) whose features are cached on the device. Not used from
    a partition store ('partitions'), where features are fetched from their owners' parts."""
    feature_dtype: str = "float32"
    """Storage dtype of node features, 'float32' or 'bfloat16' (attention sums in fp32)."""

    FLAT_KEYS = {
        "fanouts": "fanouts",
        "batch_size": "batch_size",
        "prefetch_depth": "prefetch_depth",
        "cache_fraction": "cache_fraction",
        "feature_dtype": "feature_dtype",
    }
    """Older top-level spellings of the keys (top-level key -> key here), still accepted."""

    def __post_init__(self) -> None:
        if not self.fanouts or any(f < 1 for f in self.fanouts):
            raise ValueError(f"'fanouts' must be a non-empty list of integers >= 1, got {self.fanouts}")
        if self.batch_size < 1 or self.prefetch_depth < 0:
            raise ValueError("'batch_size' must be >= 1 and 'prefetch_depth' >= 0")
        if not 0.0 <= self.cache_fraction <= 1.0:
            raise ValueError(f"'cache_fraction' must be in [0, 1], got {self.cache_fraction}")
        if self.feature_dtype not in FEATURE_DTYPE_NAMES:
            raise ValueError(f"'feature_dtype' must be 'float32' or 'bfloat16', got '{self.feature_dtype}'")

    def check_run(self, *, layers: int) -> None:
        """The checks that need the rest of the run's settings (made when the mode is 'sampled')."""
        if len(self.fanouts) != layers:
            raise ValueError(f"'fanouts' needs one entry per layer ({layers}), got {self.fanouts}")
