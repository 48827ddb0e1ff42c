"""The ``"isolated"`` section of the config: isolated (Grappa) training's own settings."""

from __future__ import annotations

from dataclasses import dataclass

from dsgraph.modes.isolated.chunks import CHUNK_METHODS, CORRECTIONS

SYNC_MODES = ("super_epoch", "step")
COMM_DTYPE_NAMES = ("bfloat16", "float32")


@dataclass(kw_only=True, slots=True)
class IsolatedConfig:
    chunks: int = 0
    """Chunks C the graph is split into, a multiple of 2 x ranks (0: 2 x ranks; with 'partitions':
    the store's part count)."""
    repart_every: int = 5
    """Epochs per super-epoch; the chunks rotate (round-robin) after each one."""
    sync: str = "super_epoch"
    """'super_epoch' (local steps; the ranks' parameters are averaged at super-epoch boundaries,
    weighted by their training nodes) or 'step' (DeepSpeed reduces gradients in every step)."""
    batch_size: int = 1000
    """Training nodes per local mini-batch on each rank (0: all of them in one step)."""
    correction: str = "resample"
    """Loss weights: 'resample' (the seed's), 'uniform', 'coverage' or 'none'."""
    halo_fraction: float = 0.05
    """Halo cache size as a share of a rank's rows (0: no cache)."""
    comm_dtype: str = "bfloat16"
    """Dtype of what isolated training sends (parameter changes at boundaries, halo features):
    'bfloat16' or 'float32'."""
    chunk_method: str = "random"
    """How nodes are split into chunks, 'random' or 'metis'."""
    prefetch: bool = True
    """Load the next super-epoch's chunks in a background thread."""
    store: str | None = None
    """Folder for the chunk store (rank 0 writes it; must be shared by all ranks); null: every rank
    writes its own in a temporary folder. Not with 'partitions', whose parts are then the chunks
    (trained one pair at a time, out of core)."""

    FLAT_KEYS = {
        "isolated_chunks": "chunks",
        "repart_every": "repart_every",
        "isolated_sync": "sync",
        "isolated_batch_size": "batch_size",
        "isolated_correction": "correction",
        "isolated_halo_fraction": "halo_fraction",
        "isolated_comm_dtype": "comm_dtype",
        "chunk_method": "chunk_method",
        "isolated_prefetch": "prefetch",
        "isolated_store": "store",
    }
    """Older top-level spellings of the keys (top-level key -> key here), still accepted."""

    def __post_init__(self) -> None:
        if self.chunks < 0 or self.repart_every < 1:
            raise ValueError("'chunks' must be >= 0 (0: 2 x ranks) and 'repart_every' >= 1")
        for key, value, allowed in (
            ("correction", self.correction, CORRECTIONS),
            ("chunk_method", self.chunk_method, CHUNK_METHODS),
            ("sync", self.sync, SYNC_MODES),
            ("comm_dtype", self.comm_dtype, COMM_DTYPE_NAMES),
        ):
            if value not in allowed:
                raise ValueError(f"'{key}' must be one of {', '.join(allowed)}; got '{value}'")
        if self.batch_size < 0 or not 0.0 <= self.halo_fraction <= 1.0:
            raise ValueError("'batch_size' must be >= 0 (0: one batch) and 'halo_fraction' in [0, 1]")

    def check_run(self, *, partitions: str | None, eval_every: int, checkpoint_every: int) -> None:
        """The checks that need the rest of the run's settings (made when the mode is 'isolated')."""
        if partitions is not None and self.store is not None:
            raise ValueError(
                "mode 'isolated' with 'partitions' trains on that store's parts as its chunks; drop isolated 'store'"
            )
        if partitions is not None and self.sync != "super_epoch":
            raise ValueError(
                "mode 'isolated' from a partition store ('partitions') trains one chunk pair at a time, so the ranks' "
                "step counts differ: use isolated 'sync' 'super_epoch', or drop 'partitions'"
            )
        if self.sync != "super_epoch":
            return
        for name, value in (("eval_every", eval_every), ("checkpoint_every", checkpoint_every)):
            if value % self.repart_every:
                raise ValueError(
                    f"with isolated 'sync' 'super_epoch' the ranks' parameters agree only at super-epoch boundaries, "
                    f"so '{name}' ({value}) must be a multiple of 'repart_every' ({self.repart_every})"
                )
