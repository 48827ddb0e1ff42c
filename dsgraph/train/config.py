"""The ``"dsgraph"`` section of a DeepSpeed JSON config, validated by dsgraph itself.

DeepSpeed silently accepts unknown top-level keys, so a typo in this section would otherwise be
ignored; here an unknown key is an error that names it and lists the valid ones.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

from dsgraph.comm.compress import CODECS
from dsgraph.graph.partition import METHODS
from dsgraph.models.options import ModelOptions

DEFAULT_STRATEGY = "ag"


@dataclass(kw_only=True, slots=True)
class DsgraphConfig:
    dataset: str = "cora"
    """'cora' (bundled), 'rmat:SCALE[:EDGE_FACTOR]' (synthetic power-law graph), or a path to a .npz."""
    strategy: str = DEFAULT_STRATEGY
    """Graph-parallel attention strategy, one of ``dsgraph.parallel.strategy_names()`` (``--help``
    lists them with a line each). 'sampled' and 'isolated' are accepted as older spellings of 'mode'."""
    backend: str = "auto"
    """Sparse attention kernel: 'auto', 'reference', 'cpu' or 'cuda'."""
    mode: str = "full"
    """Training mode: 'full' (one step per epoch on the whole graph, split by 'strategy'), 'sampled'
    (mini-batches of sampled subgraphs) or 'isolated' (Grappa: each rank trains on its own chunks;
    evaluation runs 'strategy' on the whole graph)."""
    epochs: int = 200
    """Full-graph epochs; each epoch is one optimizer step."""
    seed: int = 0
    """Seeds parameter initialisation, dropout masks and synthetic data."""
    eval_every: int = 10
    """Evaluate train/val/test accuracy on the full graph every this many epochs (and after the last)."""
    checkpoint_every: int = 0
    """Save a DeepSpeed checkpoint every this many epochs (0: never)."""
    checkpoint_dir: str = "runs/checkpoints"
    """Folder for checkpoints; --resume loads the latest one from here."""
    metrics_out: str | None = None
    """JSON-lines file for step and eval metrics (rank 0 writes it); null for none."""
    hidden: int = 128
    """Hidden size d = heads * head_dim."""
    heads: int = 8
    """Attention heads H."""
    layers: int = 2
    """Transformer blocks L."""
    ffn_mult: int = 2
    """FFN width as a multiple of hidden."""
    dropout: float = 0.5
    """Dropout after attention and FFN (masks depend only on seed, step, layer and node id)."""
    input_dropout: float = 0.5
    """Dropout on the input node features."""
    attention_dropout: float = 0.0
    """Dropout of each source node's value vector per head (GAT-style attention dropout; masks keyed
    by global node id, so results stay independent of the rank count)."""
    model: ModelOptions = dataclasses.field(default_factory=ModelOptions)
    """The architecture around the attention layers, a JSON object: block, input_projection, norm,
    residual, head, feature_norm (``dsgraph/models/options.py``; README, Configuration). Keys left
    out keep their defaults."""
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
    host_mmap_threshold_mb: int = 0
    """Host memory: fix glibc's mmap threshold at this many MiB at start-up, so that freed tensors of
    that size or more leave the resident set (``dsgraph/train/host_memory.py``); 0: glibc's own
    dynamic threshold, under which the heap keeps freed tensors below 32 MiB. Lower peak RSS per
    rank, slower steps (every such tensor is a fresh mapping whose pages fault in)."""
    checkpoint_activations: bool = False
    """Activation checkpointing: a checkpointed block keeps only its input and recomputes its forward
    in backward (exact: dropout masks are hashes; the strategy's forward collectives run again)."""
    checkpoint_every_layers: int = 1
    """With checkpoint_activations: checkpoint blocks 0, k, 2k, ... (1: every block)."""
    checkpoint_nested: bool = False
    """With checkpoint_activations: a Transformer block keeps only its input (not also its FFN's
    input) and recomputes its attention sublayer once more in backward (one more forward of it and
    of its collectives)."""
    self_loops: bool = True
    """Let every node attend to itself (adds a self loop to rows that have none)."""
    partitions: str | None = None
    """A partition store (`dsgraph partition`) with one part per rank: each rank memory-maps only its
    part. null: load the whole dataset on every rank. Not with strategies that need the whole graph."""
    partition_method: str | None = None
    """Without 'partitions': how the rows are split over the ranks. 'balanced' (contiguous ranges
    with equal in-edges), 'contiguous' (equal node counts), or a partition that relabels nodes:
    'metis' (few cut edges, in-edges balanced) or 'random'. null: the strategy's own default
    (balanced for ag, ag_ring and auto; contiguous for a2a; metis for halo)."""
    timeout_s: float = 300.0
    """If another rank dies or stops answering for this many seconds, every rank exits with a message
    (never a silent hang). Must exceed the longest epoch, evaluation or checkpoint save."""
    fanouts: list[int] = dataclasses.field(default_factory=lambda: [10, 10])
    """Mode 'sampled': in-neighbours drawn per node at hop 1..L, one entry per layer."""
    batch_size: int = 1024
    """Mode 'sampled': seed nodes per global mini-batch (split evenly over the ranks)."""
    prefetch_depth: int = 4
    """Mode 'sampled': mini-batches prepared ahead by a background thread (0: prepare in the loop)."""
    cache_fraction: float = 0.1
    """Mode 'sampled': share of nodes (the most often sampled) whose features are cached on the device."""
    feature_dtype: str = "float32"
    """Mode 'sampled': storage dtype of node features, 'float32' or 'bfloat16' (attention sums in fp32)."""
    isolated_chunks: int = 0
    """Mode 'isolated': chunks C the graph is split into, a multiple of 2 x ranks (0: 2 x ranks)."""
    repart_every: int = 5
    """Mode 'isolated': epochs per super-epoch; the chunks rotate (round-robin) after each one."""
    isolated_sync: str = "super_epoch"
    """Mode 'isolated': 'super_epoch' (local steps, parameters averaged at super-epoch boundaries, as
    Grappa does) or 'step' (DeepSpeed reduces gradients in every step)."""
    isolated_batch_size: int = 1000
    """Mode 'isolated': training nodes per local mini-batch on each rank (0: all of them in one step)."""
    isolated_correction: str = "resample"
    """Mode 'isolated': loss weights: 'resample' (the seed's), 'uniform', 'coverage' or 'none'."""
    isolated_halo_fraction: float = 0.05
    """Mode 'isolated': halo cache size as a share of a rank's rows (0: no cache)."""
    isolated_comm_dtype: str = "bfloat16"
    """Mode 'isolated': dtype of what isolated training sends: parameter changes at boundaries and
    halo features, 'bfloat16' or 'float32'."""
    chunk_method: str = "random"
    """Mode 'isolated': how nodes are split into chunks, 'random' or 'metis'."""
    isolated_prefetch: bool = True
    """Mode 'isolated': load the next super-epoch's chunks in a background thread."""
    isolated_store: str | None = None
    """Mode 'isolated': folder for the chunk store (rank 0 writes it; must be shared by all ranks);
    null: every rank writes its own in a temporary folder."""
    agp_profile: str | None = None
    """Strategy 'auto': the AGP profile JSON (`dsgraph profile`); missing or unusable: fall back to 'ag'."""
    agp_recalibrate_after: int = 5
    """Strategy 'auto': measured steps (after one warm-up step) before the model is recalibrated and
    a strategy predicted >= 20% faster is switched to (0: never)."""
    trace_steps: str | None = None
    """'A:B': record torch.profiler traces of steps A..B-1 on every rank into 'trace_dir'; null: none."""
    trace_dir: str = "runs/traces"
    """Folder for the per-rank traces (TensorBoard trace handler files, open in Perfetto)."""
    keep_checkpoints: int = 3
    """Complete checkpoints kept in 'checkpoint_dir' (the newest; older ones and their universal
    conversions are deleted after each save); 0: keep all."""
    preempt_signals: list[str] = dataclasses.field(default_factory=lambda: ["SIGTERM", "SIGUSR1"])
    """Signals that preempt the job: every rank finishes its step, the ranks agree at the epoch end,
    write a checkpoint and exit with code 4 (``dsgraph/train/preemption.py``); [] keeps the signals'
    default action (SIGTERM ends the process at once)."""

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):
            try:
                self.model = ModelOptions.from_dict(self.model)
            except ValueError as err:
                raise ValueError(f"dsgraph config: {err}") from None
        for name in ("epochs", "hidden", "heads", "layers", "ffn_mult", "eval_every", "checkpoint_every_layers", "comm_chunks"):
            if getattr(self, name) < 1:
                raise ValueError(f"dsgraph config: '{name}' must be >= 1, got {getattr(self, name)}")
        if self.checkpoint_every < 0:
            raise ValueError("dsgraph config: 'checkpoint_every' must be >= 0 (0 disables checkpoints)")
        if self.checkpoint_nested and not self.checkpoint_activations:
            raise ValueError("dsgraph config: 'checkpoint_nested' needs 'checkpoint_activations': true")
        if self.regather_kv and self.checkpoint_activations:
            raise ValueError("dsgraph config: 'regather_kv' does nothing with 'checkpoint_activations' (a checkpointed "
                             "block gathers K and V again in its recompute); set one of them")
        if self.host_mmap_threshold_mb < 0:
            raise ValueError("dsgraph config: 'host_mmap_threshold_mb' must be >= 0 (0: glibc's dynamic threshold)")
        _check_strategy_and_mode(self)
        for name in ("comm_dtype", "comm_grad_dtype"):
            if getattr(self, name) not in CODECS:
                raise ValueError(f"dsgraph config: '{name}' must be one of {', '.join(CODECS)}; got '{getattr(self, name)}'")
        _check_agp(self)
        _check_sampled(self)
        _check_isolated(self)
        if self.partition_method is not None and self.partition_method not in METHODS:
            raise ValueError(f"dsgraph config: 'partition_method' must be one of {', '.join(METHODS)}; got '{self.partition_method}'")
        if not self.timeout_s > 0:
            raise ValueError(f"dsgraph config: 'timeout_s' must be > 0 seconds, got {self.timeout_s}")
        if self.hidden % self.heads:
            raise ValueError(f"dsgraph config: 'hidden' ({self.hidden}) must be divisible by 'heads' ({self.heads})")
        for name in ("dropout", "input_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"dsgraph config: '{name}' must be in [0, 1), got {getattr(self, name)}")
        if self.keep_checkpoints < 0:
            raise ValueError(f"dsgraph config: 'keep_checkpoints' must be >= 0 (0: keep all), got {self.keep_checkpoints}")
        _check_preempt_signals(self.preempt_signals)

    @classmethod
    def from_dict(cls, section: dict, source: str = "config") -> "DsgraphConfig":
        if not isinstance(section, dict):
            raise ValueError(f"{source}: the \"dsgraph\" section must be a JSON object")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(section) - set(fields))
        if unknown:
            raise ValueError(
                f"{source}: unknown key(s) {', '.join(repr(k) for k in unknown)} in the \"dsgraph\" section; "
                f"valid keys: {', '.join(fields)}"
            )
        for key, value in section.items():
            _check_type(key, value, fields[key].type, source)
        try:
            return cls(**section)
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _check_strategy_and_mode(cfg: DsgraphConfig) -> None:
    """A registered strategy and mode (the older spellings 'strategy': 'sampled' | 'isolated' become
    the mode), and data a strategy can run on."""
    from dsgraph.parallel import Needs, get_strategy, strategy_names
    from dsgraph.train.modes import mode_names

    modes = mode_names()
    if cfg.strategy in modes and cfg.strategy != "full":
        if cfg.mode not in ("full", cfg.strategy):
            raise ValueError(f"dsgraph config: 'strategy' '{cfg.strategy}' is a mode, but 'mode' says '{cfg.mode}'")
        cfg.mode, cfg.strategy = cfg.strategy, DEFAULT_STRATEGY
    if cfg.mode not in modes:
        raise ValueError(f"dsgraph config: 'mode' must be one of {', '.join(modes)}; got '{cfg.mode}'")
    if cfg.strategy not in strategy_names():
        raise ValueError(f"dsgraph config: 'strategy' must be one of {', '.join(strategy_names())} "
                         f"(or a mode: {', '.join(m for m in modes if m != 'full')}); got '{cfg.strategy}'")  # fmt: skip
    needs = get_strategy(cfg.strategy).needs
    if cfg.partitions is not None and needs is Needs.WHOLE_GRAPH:
        readers = [n for n in strategy_names() if get_strategy(n).needs is not Needs.WHOLE_GRAPH]
        raise ValueError(
            f"dsgraph config: strategy '{cfg.strategy}' needs {needs.value}, but 'partitions' loads one part per "
            f"rank; use one of {', '.join(readers)} with partitions, or drop 'partitions'"
        )


def _check_preempt_signals(names: list[str]) -> None:
    from dsgraph.train.preemption import SIGNALS

    for name in names:
        if name not in SIGNALS:
            raise ValueError(f"dsgraph config: 'preempt_signals' entries must be among {', '.join(SIGNALS)}; got {name!r}")


def _check_agp(cfg: DsgraphConfig) -> None:
    """AGP and trace settings."""
    if cfg.agp_recalibrate_after < 0:
        raise ValueError(f"dsgraph config: 'agp_recalibrate_after' must be >= 0 (0: never), got {cfg.agp_recalibrate_after}")
    if cfg.trace_steps is not None:
        parse_trace_steps(cfg.trace_steps)


def parse_trace_steps(spec: str) -> tuple[int, int]:
    """'A:B' -> (A, B) with 0 <= A < B: trace steps A..B-1 (0-based epochs of this run)."""
    try:
        a, b = (int(x) for x in spec.split(":"))
    except ValueError:
        raise ValueError(f"dsgraph config: 'trace_steps' must look like A:B (for example 3:5), got {spec!r}") from None
    if not 0 <= a < b:
        raise ValueError(f"dsgraph config: 'trace_steps' A:B needs 0 <= A < B, got {spec!r}")
    return a, b


def _check_sampled(cfg: DsgraphConfig) -> None:
    """The mini-batch settings (checked whatever the strategy; fanouts must match layers only for 'sampled')."""
    if not cfg.fanouts or any(f < 1 for f in cfg.fanouts):
        raise ValueError(f"dsgraph config: 'fanouts' must be a non-empty list of integers >= 1, got {cfg.fanouts}")
    if cfg.mode == "sampled" and len(cfg.fanouts) != cfg.layers:
        raise ValueError(f"dsgraph config: 'fanouts' needs one entry per layer ({cfg.layers}), got {cfg.fanouts}")
    if cfg.mode == "sampled" and cfg.partitions is not None:
        raise ValueError("dsgraph config: mode 'sampled' samples from the whole graph; drop 'partitions'")
    if cfg.batch_size < 1 or cfg.prefetch_depth < 0:
        raise ValueError("dsgraph config: 'batch_size' must be >= 1 and 'prefetch_depth' >= 0")
    if not 0.0 <= cfg.cache_fraction <= 1.0:
        raise ValueError(f"dsgraph config: 'cache_fraction' must be in [0, 1], got {cfg.cache_fraction}")
    if cfg.feature_dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dsgraph config: 'feature_dtype' must be 'float32' or 'bfloat16', got '{cfg.feature_dtype}'")


def _check_isolated(cfg: DsgraphConfig) -> None:
    """The isolated-training settings (the chunk count is checked against the rank count at start-up)."""
    from dsgraph.parallel.isolated import CHUNK_METHODS, CORRECTIONS

    if cfg.isolated_chunks < 0 or cfg.repart_every < 1:
        raise ValueError("dsgraph config: 'isolated_chunks' must be >= 0 (0: 2 x ranks) and 'repart_every' >= 1")
    if cfg.isolated_correction not in CORRECTIONS:
        raise ValueError(f"dsgraph config: 'isolated_correction' must be one of {', '.join(CORRECTIONS)}; got '{cfg.isolated_correction}'")
    if cfg.chunk_method not in CHUNK_METHODS:
        raise ValueError(f"dsgraph config: 'chunk_method' must be one of {', '.join(CHUNK_METHODS)}; got '{cfg.chunk_method}'")
    if cfg.isolated_sync not in ("super_epoch", "step"):
        raise ValueError(f"dsgraph config: 'isolated_sync' must be 'super_epoch' or 'step'; got '{cfg.isolated_sync}'")
    if cfg.isolated_batch_size < 0 or not 0.0 <= cfg.isolated_halo_fraction <= 1.0:
        raise ValueError("dsgraph config: 'isolated_batch_size' must be >= 0 (0: one batch) and 'isolated_halo_fraction' in [0, 1]")
    if cfg.isolated_comm_dtype not in ("bfloat16", "float32"):
        raise ValueError(f"dsgraph config: 'isolated_comm_dtype' must be 'bfloat16' or 'float32'; got '{cfg.isolated_comm_dtype}'")
    if cfg.mode == "isolated" and cfg.partitions is not None:
        raise ValueError("dsgraph config: mode 'isolated' writes its own chunk store; drop 'partitions'")
    if cfg.mode == "isolated" and cfg.isolated_sync == "super_epoch":
        for name in ("eval_every", "checkpoint_every"):
            if getattr(cfg, name) % cfg.repart_every:
                raise ValueError(
                    f"dsgraph config: with 'isolated_sync' 'super_epoch' the ranks' parameters agree only at super-epoch "
                    f"boundaries, so '{name}' ({getattr(cfg, name)}) must be a multiple of 'repart_every' ({cfg.repart_every})"
                )


_TYPES = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "str | None": (str, type(None)), "list[int]": (list,), "list[str]": (list,),
          "ModelOptions": (dict, ModelOptions)}


def _check_type(key: str, value, type_name: str, source: str) -> None:
    allowed = _TYPES[type_name]
    if type_name == "list[int]" and isinstance(value, list) and not all(type(v) is int for v in value):
        allowed = ()
    if type_name == "list[str]" and isinstance(value, list) and not all(type(v) is str for v in value):
        allowed = ()
    if isinstance(value, bool) and bool not in allowed:
        allowed = ()
    if not isinstance(value, allowed):
        what = "a JSON object" if type_name == "ModelOptions" else type_name
        raise ValueError(f"{source}: \"dsgraph\" key '{key}' must be {what}, got {value!r}")


def load_ds_config(path: str) -> tuple[dict, DsgraphConfig]:
    """Reads a DeepSpeed JSON; returns (DeepSpeed's part without "dsgraph", the validated section)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such DeepSpeed config file")
    with open(path) as f:
        try:
            config = json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: a DeepSpeed config must be a JSON object")
    if "sequence_parallel_size" in config:
        raise ValueError(f"{path}: remove 'sequence_parallel_size'; dsgraph's graph parallelism is not DeepSpeed sequence parallelism")
    section = config.pop("dsgraph", {})
    return config, DsgraphConfig.from_dict(section, source=path)
