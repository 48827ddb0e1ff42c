"""The ``"parallel"`` section of the config: how the graph-parallel strategies split the rows over
the ranks and move them, declared once beside the strategies that read it.

A strategy gets this object in its ``StrategyContext`` (``ctx.parallel``) and AGP's cost model in
its ``ModelShape`` (``model.parallel``); nothing copies its fields. The section holds what only
the strategies read: how activation rows and their gradients travel (``comm_dtype``,
``comm_grad_dtype``), the head groups whose exchange overlaps attention (``comm_chunks``), GP-AG's
``regather_kv``, and ``partition_method``, the row split for the strategy, whose default is the
strategy's own (``Strategy.split_method``). ``strategy`` stays a top-level key (it picks the code
this section configures); so do ``backend`` (the kernel, which modes that run no strategy use too)
and ``partitions`` (data on disk, read by the loader whatever the strategy). The older top-level
spellings of the keys are still accepted (``FLAT_KEYS``).
"""

from __future__ import annotations

from dataclasses import dataclass

from dsgraph.comm.compress import CODECS, get_codec
from dsgraph.graph.partition import METHODS


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelConfig:
    comm_dtype: str = "none"
    """How activation rows travel between ranks (K/V rows, halo rows, head slices): 'none', 'bf16',
    or 'int8' (one fp32 scale per row; 132 instead of 512 bytes per row at H*D = 128)."""
    comm_grad_dtype: str = "none"
    """How their gradients travel in backward: 'none' (the compute dtype), 'bf16' or 'int8'."""
    comm_chunks: int = 1
    """ag and a2a: exchange the heads in this many groups, the next group travelling while attention
    runs on the current one (1: one exchange, no overlap)."""
    regather_kv: bool = False
    """ag: do not keep the all-gathered K and V (N x d each, per layer) from forward to backward;
    backward all-gathers them again from each rank's rows (one more all-gather per layer, the
    forward's bytes). With comm_chunks G, one head group's replica exists at a time. Refused with
    checkpoint_activations (a checkpointed block gathers them again in its recompute anyway)."""
    partition_method: str | None = None
    """Without 'partitions': how the rows are split over the ranks. 'balanced' (contiguous ranges
    with equal in-edges), 'contiguous' (equal node counts), or a partition that relabels nodes:
    'metis' (few cut edges, in-edges balanced) or 'random'. null: the strategy's own default
    (balanced for ag, ag_ring and auto; contiguous for a2a; metis for halo)."""

    FLAT_KEYS = {
        "comm_dtype": "comm_dtype",
        "comm_grad_dtype": "comm_grad_dtype",
        "comm_chunks": "comm_chunks",
        "regather_kv": "regather_kv",
        "partition_method": "partition_method",
    }
    """Older top-level spellings of the keys (top-level key -> key here), still accepted."""

    def __post_init__(self) -> None:
        for name in ("comm_dtype", "comm_grad_dtype"):
            if getattr(self, name) not in CODECS:
                raise ValueError(f"'{name}' must be one of {', '.join(CODECS)}; got '{getattr(self, name)}'")
        if self.comm_chunks < 1:
            raise ValueError(f"'comm_chunks' must be >= 1, got {self.comm_chunks}")
        if self.partition_method is not None and self.partition_method not in METHODS:
            raise ValueError(f"'partition_method' must be one of {', '.join(METHODS)}; got '{self.partition_method}'")

    def split_method(self, strategy) -> str:
        """How the rows are split for ``strategy`` (a ``Strategy``): this section's choice, else its own."""
        return self.partition_method or strategy.split_method

    @property
    def codec(self):
        """The codec activation rows travel in (``comm/compress.py``)."""
        return get_codec(self.comm_dtype)

    @property
    def grad_codec(self):
        """The codec their gradients travel in."""
        return get_codec(self.comm_grad_dtype)
