"""Node features for sampled training: stored in fp32 or bf16, with a cache of hot nodes.

The cache models the device-resident copy of the features that mini-batches touch most: the rows
of the ``cache_fraction * N`` hottest nodes live in one contiguous tensor on the training device;
every other row is gathered from the full table (host memory) and copied over. Gathering counts
hits and misses, so the hit rate (the share of gathered rows served by the cache) is measured, not
estimated. Features keep the storage dtype through the gather (bf16 halves the bytes moved); the
trainer casts them to the compute dtype, and attention accumulates in fp32 either way.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

FEATURE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def in_degree_scores(rowptr: torch.Tensor) -> torch.Tensor:
    """Hotness by in-degree: float64 [N]."""
    return (rowptr[1:] - rowptr[:-1]).to(torch.float64)


def sampling_frequency_scores(rowptr: torch.Tensor, col: torch.Tensor, fanout: int) -> torch.Tensor:
    """Hotness by how often a node is drawn: float64 [N], the expected number of times node u is
    drawn when every row is expanded once with ``fanout`` (sum over the rows v that list u of
    min(1, fanout / deg(v))). High out-degree into low-degree rows makes a node hot."""
    degrees = (rowptr[1:] - rowptr[:-1]).to(torch.float64)
    per_row = torch.clamp(fanout / degrees.clamp(min=1.0), max=1.0)
    per_edge = torch.repeat_interleave(per_row, rowptr[1:] - rowptr[:-1])
    return torch.bincount(col.long(), weights=per_edge, minlength=degrees.numel())


class FeatureStore:
    """Features [N, F] in ``dtype`` with the rows of the hottest nodes cached on ``device``.

    x: float [N, F] features; dtype: storage dtype (float32 or bfloat16); cache_fraction: share of
    nodes cached, in [0, 1]; hot_scores: float [N], higher is hotter (ties: lower id first); needed
    when cache_fraction > 0. ``gather`` is safe to call from several threads.
    """

    def __init__(
        self,
        x: torch.Tensor,
        *,
        dtype: torch.dtype = torch.float32,
        cache_fraction: float = 0.0,
        hot_scores: torch.Tensor | None = None,
        device: torch.device | str = "cpu",
    ):
        if dtype not in FEATURE_DTYPES.values():
            raise ValueError(f"feature dtype must be one of {', '.join(FEATURE_DTYPES)}, got {dtype}")
        if not 0.0 <= cache_fraction <= 1.0:
            raise ValueError(f"cache_fraction must be in [0, 1], got {cache_fraction}")
        n = x.shape[0]
        self.device = torch.device(device)
        self.x = x.to(dtype).contiguous()  # the full table, host memory
        if self.device.type == "cuda":
            self.x = self.x.pin_memory()
        num_cached = int(round(cache_fraction * n))
        if num_cached and (hot_scores is None or hot_scores.shape != (n,)):
            raise ValueError(f"a feature cache needs hot_scores of shape [{n}]")
        hot = np.argsort(-hot_scores.numpy(), kind="stable")[:num_cached] if num_cached else np.zeros(0, np.int64)
        self.cached_ids = torch.from_numpy(hot.astype(np.int64))
        self.slot = torch.full((n,), -1, dtype=torch.int64)  # node -> row in the cache, -1 if not cached
        self.slot[self.cached_ids] = torch.arange(num_cached)
        self.cache = self.x[self.cached_ids].to(self.device)  # contiguous hot rows, device-resident
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    @property
    def num_features(self) -> int:
        return self.x.shape[1]

    @property
    def table_bytes(self) -> int:
        """Bytes of the full feature table."""
        return self.x.numel() * self.x.element_size()

    @property
    def cache_bytes(self) -> int:
        return self.cache.numel() * self.cache.element_size()

    @property
    def hit_rate(self) -> float:
        """Share of all rows gathered so far that came from the cache (0 before any gather)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, int]:
        """Rows ``ids`` (int64 [n] global ids) -> (features [n, F] in the storage dtype on the
        store's device, number of rows served by the cache)."""
        slots = self.slot[ids]
        hit = slots >= 0
        hit_rows = hit.nonzero().squeeze(1)
        miss_rows = (~hit).nonzero().squeeze(1)
        out = torch.empty((ids.numel(), self.num_features), dtype=self.x.dtype, device=self.device)
        from_cache = self.cache.index_select(0, slots[hit_rows].to(self.device))
        from_table = self.x.index_select(0, ids[miss_rows]).to(self.device, non_blocking=True)
        out.index_copy_(0, hit_rows.to(self.device), from_cache)
        out.index_copy_(0, miss_rows.to(self.device), from_table)
        hits = hit_rows.numel()
        with self._lock:
            self.hits += hits
            self.misses += miss_rows.numel()
        return out, hits

    def reset_counts(self) -> None:
        with self._lock:
            self.hits = self.misses = 0
