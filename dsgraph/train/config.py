"""The ``"dsgraph"`` section of a DeepSpeed JSON config, validated by dsgraph itself.

DeepSpeed silently accepts unknown top-level keys, so a typo in this section would otherwise be
ignored; here an unknown key is an error that names it and lists the valid ones.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

from dsgraph.agp.config import AgpConfig
from dsgraph.graph.label_checks import SplitChoice
from dsgraph.models.options import ModelOptions
from dsgraph.modes.isolated.config import IsolatedConfig
from dsgraph.modes.registry import DEFAULT_MODE, MODES, mode_names
from dsgraph.modes.sampled.config import SampledConfig
from dsgraph.ops.dispatch import backend_names
from dsgraph.parallel import Needs, ParallelConfig, get_strategy, strategy_names
from dsgraph.tasks import TASKS, get_task, task_names
from dsgraph.tasks.link_config import LinkConfig

DEFAULT_STRATEGY = "ag"


@dataclass(kw_only=True, slots=True)
class DsgraphConfig:
    dataset: str = "cora"
    """'cora' (bundled), 'rmat:SCALE[:EDGE_FACTOR]' (synthetic power-law graph; ':labels=T' a
    multi-label task, ':structural' two classes at 80/20 with 7 structural features), or a path to a .npz."""
    strategy: str = DEFAULT_STRATEGY
    """Graph-parallel attention strategy, one of ``dsgraph.parallel.strategy_names()`` (``--help``
    lists them with a line each). 'sampled' and 'isolated' are accepted as older spellings of 'mode'."""
    backend: str = "auto"
    """Sparse attention kernel: 'auto', 'reference', 'cpu' or 'cuda'."""
    mode: str = DEFAULT_MODE
    """Training mode: 'full' (one step per epoch on the whole graph, split by 'strategy'), 'sampled'
    (mini-batches of sampled subgraphs) or 'isolated' (Grappa: each rank trains on its own chunks;
    evaluation runs 'strategy' on the whole graph)."""
    epochs: int = 200
    """Full-graph epochs; each epoch is one optimizer step."""
    seed: int = 0
    """Seeds parameter initialisation, dropout masks and synthetic data."""
    eval_every: int = 10
    """Evaluate train/val/test accuracy on the full graph every this many epochs (and after the last)."""
    split: int = 0
    """Which of the dataset's fixed splits to train on, when its masks are [S, N] (0-based; the
    heterophilous benchmarks ship 10). Masks [N] are split 0."""
    allow_overlapping_splits: bool = False
    """Accept nodes that are in two of train/val/test; by default such masks are refused with the
    counts (a test set equal to the training set reports training accuracy as test accuracy)."""
    num_classes: int | None = None
    """The number of classes of a node classification task; null: the largest class id + 1. A label
    far outside the others (one node of class 99 among classes 0-5) is refused unless this declares
    the count; with it, every label must be below it (``dsgraph/graph/label_checks.py``)."""
    task: str = "node"
    """What the run learns, one of ``dsgraph.tasks.task_names()`` (``dsgraph/tasks/``): 'node' (node
    classification, from the labels: multi-class, binary or multi-label), 'link' (link prediction on
    the dataset's edges, mode 'full', every strategy; the 'link' section) or 'regression' (node
    regression of a continuous target 'y' float [N] or [N, T] with MSE, mode 'full', every strategy;
    docs/guides/regression.md)."""
    metric: str | None = None
    """The evaluation metric that eval rows report as val_<metric>/test_<metric> and that picks the
    best epoch (the best validation value, higher or lower as the metric improves), computed exactly
    over all ranks' rows; the task checks it. Node classification: 'accuracy', 'rocauc', 'ap',
    'f1_micro' or 'f1_macro'; null: accuracy for multi-class tasks, ROC-AUC for binary and multi-label
    ones; accuracy is reported as val_acc/test_acc whatever the metric. A link task: 'rocauc' (its
    default), 'ap', 'mrr' or 'hits@K' (any integer K), OGB's conventions. Regression: 'mse' (its
    default, lower is better), 'mae' (lower is better) or 'r2' (higher is better); all three are
    reported."""
    early_stop_patience: int = 0
    """Stop training when this many evaluations in a row have not improved the best validation value
    of 'metric' (0: never stop early). The best evaluation stays the model selection."""
    checkpoint_every: int = 0
    """Save a DeepSpeed checkpoint every this many epochs (0: never)."""
    run_name: str | None = None
    """This run's name; '{run_name}' in the output paths below (and TensorBoard's output_path) is
    replaced by it and TensorBoard's job_name becomes it (``dsgraph/train/run_name.py``). null:
    '<config stem>-<UTC time stamp>', a new one for every run. --resume needs the name of the run
    it continues."""
    checkpoint_dir: str | None = None
    """Folder for checkpoints; --resume loads the latest one from here. null: runs/<run_name>/checkpoints."""
    metrics_out: str | None = None
    """JSON-lines file for step and eval metrics (rank 0 writes it). null: runs/<run_name>/
    metrics.jsonl from the training command, no file for a Trainer built in Python."""
    hidden: int = 64
    """Hidden size d = heads * head_dim."""
    heads: int = 8
    """Attention heads H."""
    layers: int = 2
    """Attention layers L, the output layer included (GAT's 2-layer network is 2)."""
    ffn_mult: int = 2
    """FFN width as a multiple of hidden."""
    dropout: float = 0.2
    """Dropout after attention and FFN (masks depend only on seed, step, layer and node id)."""
    input_dropout: float = 0.2
    """Dropout on the input node features."""
    attention_dropout: float = 0.0
    """Dropout of each source node's value vector per head (GAT-style attention dropout; masks keyed
    by global node id, so results stay independent of the rank count)."""
    model: ModelOptions = dataclasses.field(default_factory=ModelOptions)
    """The architecture around the attention layers, a JSON object: block, input_projection, norm,
    residual, head, feature_norm, global_attention, edge_features, encodings, encoding_input, max_degree,
    degree_dim, ego, norm_type, jk (``dsgraph/models/options.py``; docs/concepts/model.md). Keys left
    out keep their defaults."""
    parallel: ParallelConfig = dataclasses.field(default_factory=ParallelConfig)
    """How the strategy splits and moves the rows, a JSON object (``dsgraph/parallel/config.py``):
    comm_dtype, comm_grad_dtype, comm_chunks, regather_kv, partition_method. The older top-level
    spellings of these keys are still accepted."""
    host_mmap_threshold_mb: int = 0
    """Host memory: fix glibc's mmap threshold at this many MiB at start-up, so that freed tensors of
    that size or more leave the resident set (``dsgraph/runtime/host_memory.py``); 0: glibc's own
    dynamic threshold, under which the heap keeps freed tensors below 32 MiB. Lower peak RSS per
    rank, slower steps (every such tensor is a fresh mapping whose pages fault in). -1: no threshold,
    every tensor from the heap, which keeps what is freed: once the heap reached a step's high-water
    mark, no page faults for tensors of 32 MiB and more; the highest resident set."""
    memory_limit_mb: float = 0
    """Per-rank memory a run may use, in MB: a full-graph run predicted to peak above it is refused before
    its graph is loaded, with the settings predicted to fit (``dsgraph/agp/run_memory.py``). 0: the
    machine's available memory divided by the ranks on it; ``$DSGRAPH_MEMORY_LIMIT_MB`` overrides both."""
    auto_checkpoint: bool = True
    """Turn activation checkpointing on (nested) when a CPU run is predicted not to fit its memory limit
    without it and to fit with it (the log says so); false: refuse such a run instead."""
    checkpoint_activations: bool = False
    """Activation checkpointing: a checkpointed block keeps only its input and recomputes its forward
    in backward (exact: dropout masks are hashes; the strategy's forward collectives run again)."""
    selective_recompute: bool = True
    """Keep what each attention keeps (q, k, v and its kernel's tensors), the block's input and the
    attention's output, and recompute the norms, projections, global branch, FFN and dropout masks in
    backward (exact: the same values). About a third of a Transformer block's kept bytes, for a few
    percent more step time; blocks checkpointed whole (checkpoint_activations) recompute everything anyway."""
    checkpoint_every_layers: int = 1
    """With checkpoint_activations: checkpoint blocks 0, k, 2k, ... (1: every block)."""
    checkpoint_nested: bool = False
    """With checkpoint_activations: a Transformer block keeps only its input (not also its FFN's
    input) and recomputes its attention sublayer once more in backward (one more forward of it and
    of its collectives)."""
    self_loops: bool = True
    """Let every node attend to itself (adds a self loop to rows that have none). A model that keeps
    the node apart from its neighbours (model.ego 'sep', block 'sage') gets none whatever this says
    (``adds_self_loops``)."""
    partitions: str | None = None
    """A partition store (`dsgraph partition`) with one part per rank: each rank memory-maps only its
    part. null: load the whole dataset on every rank. Not with strategies that need the whole graph.
    Mode 'isolated' takes any part count: the parts are its chunks, trained one pair at a time.
    Mode 'sampled': each rank's sampled neighbours and their features are fetched from the ranks
    that own them (the whole-graph run's batches), and evaluation runs in sampled chunks."""
    timeout_s: float = 300.0
    """If another rank dies or stops answering for this many seconds, every rank exits with a message
    (never a silent hang). Must exceed the longest epoch, evaluation or checkpoint save."""
    heartbeat_timeout_s: float = 30.0
    """A rank whose control-plane heartbeat (sent every heartbeat_timeout_s / 6 seconds by a thread of
    its own, whatever the rank is computing) stops for this many seconds, e.g. a stopped process, is
    named by the others, which exit within about this bound (docs/guides/reliability.md)."""
    sampled: SampledConfig = dataclasses.field(default_factory=SampledConfig)
    """Mode 'sampled': its settings, a JSON object (``dsgraph/modes/sampled/config.py``): fanouts,
    batch_size, prefetch_depth, cache_fraction, feature_dtype. The older top-level spellings of these
    keys are still accepted."""
    isolated: IsolatedConfig = dataclasses.field(default_factory=IsolatedConfig)
    """Mode 'isolated': its settings, a JSON object (``dsgraph/modes/isolated/config.py``): chunks,
    repart_every, sync, batch_size, correction, halo_fraction, comm_dtype, chunk_method, prefetch,
    store. The older top-level spellings (isolated_chunks, repart_every, isolated_sync, ...) are
    still accepted."""
    link: LinkConfig = dataclasses.field(default_factory=LinkConfig)
    """'task': 'link': its settings, a JSON object (``dsgraph/tasks/link_config.py``):
    val_fraction, test_fraction, split_seed, negatives, decoder, decoder_hidden, embedding_dim,
    hits_at (docs/guides/link-prediction.md)."""
    agp: AgpConfig = dataclasses.field(default_factory=AgpConfig)
    """AGP's settings, a JSON object (``dsgraph/agp/config.py``): profile and recalibrate_after (strategy
    'auto'), plan (a launch plan of ``--nprocs auto``). The top-level spellings agp_profile,
    agp_recalibrate_after and launch_plan are accepted too."""
    trace_steps: str | None = None
    """'A:B': record torch.profiler traces of steps A..B-1 on every rank into 'trace_dir'; null: none."""
    trace_dir: str | None = None
    """Folder for the per-rank traces (``rank<r>.*.pt.trace.json``). null: the run's TensorBoard folder
    (``<output_path>/<run_name>``, read by TensorBoard's PyTorch Profiler tab), or runs/<run_name>/traces
    without TensorBoard. Any folder also opens in Perfetto."""
    keep_checkpoints: int = 3
    """Complete checkpoints kept in 'checkpoint_dir' (the newest; older ones and their universal
    conversions are deleted after each save); 0: keep all."""
    checkpoint_failure: str = "continue"
    """What a checkpoint save that the disk refuses (ENOSPC, EIO, a read-only folder) does: the save
    never touches the previous checkpoints and leaves no temporary files; 'continue' warns (naming the
    folder, the error and the free space), keeps training and saves again at the next interval;
    'stop' ends the run with that message (exit code 2). ``dsgraph/train/save_guard.py``."""
    nonfinite: str = "stop"
    """What a non-finite training loss or parameter after a step (a NaN or inf gradient) does; every
    rank sees it in the same step: 'stop' ends the run (exit code 2) naming the epoch, the ranks and
    the first non-finite parameter; 'rollback' reloads the newest checkpoint, multiplies the learning
    rate by 'nonfinite_lr_factor' and skips the step that failed (needs checkpoint_every).
    ``dsgraph/train/nonfinite.py``."""
    nonfinite_lr_factor: float = 0.5
    """With nonfinite 'rollback': the learning rate is multiplied by this after each rollback (0 < f < 1)."""
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
        for name, cls in SECTIONS.items():
            if isinstance(getattr(self, name), dict):
                setattr(self, name, _section(cls, getattr(self, name), name))
        for name in ("epochs", "hidden", "heads", "layers", "ffn_mult", "eval_every", "checkpoint_every_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"dsgraph config: '{name}' must be >= 1, got {getattr(self, name)}")
        if self.checkpoint_every < 0:
            raise ValueError("dsgraph config: 'checkpoint_every' must be >= 0 (0 disables checkpoints)")
        if not isinstance(self.memory_limit_mb, (int, float)) or self.memory_limit_mb < 0:
            raise ValueError(f"dsgraph config: 'memory_limit_mb' must be a number >= 0, got {self.memory_limit_mb!r}")
        if self.early_stop_patience < 0:
            raise ValueError("dsgraph config: 'early_stop_patience' must be >= 0 (0: never stop early)")
        if self.checkpoint_nested and not self.checkpoint_activations:
            raise ValueError("dsgraph config: 'checkpoint_nested' needs 'checkpoint_activations': true")
        if self.parallel.regather_kv and self.checkpoint_activations:
            raise ValueError(
                "dsgraph config: 'parallel.regather_kv' does nothing with 'checkpoint_activations' (a "
                "checkpointed block gathers K and V again in its recompute); set one of them"
            )
        if self.host_mmap_threshold_mb < -1:
            raise ValueError(
                "dsgraph config: 'host_mmap_threshold_mb' must be a size in MiB, 0 (glibc's dynamic threshold) "
                f"or -1 (every tensor from the heap), got {self.host_mmap_threshold_mb}"
            )
        _check_strategy_and_mode(self)
        if self.num_classes is not None and self.num_classes < 1:
            raise ValueError(f"dsgraph config: 'num_classes' must be >= 1 (or null), got {self.num_classes}")
        if self.split < 0:
            raise ValueError(f"dsgraph config: 'split' must be >= 0 (a 0-based split index), got {self.split}")
        _check_task(self)
        if self.backend != "auto" and self.backend not in backend_names():
            raise ValueError(
                f"dsgraph config: 'backend' must be one of auto, {', '.join(backend_names())}; got '{self.backend}'"
            )
        if self.trace_steps is not None:
            parse_trace_steps(self.trace_steps)
        _check_mode_sections(self)
        if not self.timeout_s > 0:
            raise ValueError(f"dsgraph config: 'timeout_s' must be > 0 seconds, got {self.timeout_s}")
        if not self.heartbeat_timeout_s > 0:
            raise ValueError(
                f"dsgraph config: 'heartbeat_timeout_s' must be > 0 seconds, got {self.heartbeat_timeout_s}"
            )
        if self.hidden % self.heads:
            raise ValueError(f"dsgraph config: 'hidden' ({self.hidden}) must be divisible by 'heads' ({self.heads})")
        for name in ("dropout", "input_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"dsgraph config: '{name}' must be in [0, 1), got {getattr(self, name)}")
        if self.keep_checkpoints < 0:
            raise ValueError(
                f"dsgraph config: 'keep_checkpoints' must be >= 0 (0: keep all), got {self.keep_checkpoints}"
            )
        _check_preempt_signals(self.preempt_signals)
        _check_fault_actions(self)

    @classmethod
    def from_dict(cls, section: dict, source: str = "config") -> DsgraphConfig:
        """The validated section; a mode's keys may also be given at the top level (older spellings)."""
        if not isinstance(section, dict):
            raise ValueError(f'{source}: the "dsgraph" section must be a JSON object')
        section = _nest_flat_keys(section, source)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(section) - set(fields))
        if unknown:
            raise ValueError(
                f'{source}: unknown key(s) {", ".join(repr(k) for k in unknown)} in the "dsgraph" section; '
                f"valid keys: {', '.join(fields)}"
            )
        for key, value in section.items():
            _check_type(key, value, fields[key].type, source)
        try:
            return cls(**section)
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None

    def split_choice(self) -> SplitChoice:
        """The dataset split this run reads, and how it reads the labels (``dsgraph/graph/label_checks.py``)."""
        continuous = get_task(self.task).continuous_target
        return SplitChoice(
            split=self.split,
            allow_overlap=self.allow_overlapping_splits,
            continuous=continuous,
            num_classes=self.num_classes,
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def adds_self_loops(self) -> bool:
        """Whether the run adds a self loop to every row that has none: 'self_loops', unless the model
        keeps each node apart from its aggregation (``ModelOptions.aggregates_self``)."""
        return self.self_loops and self.model.aggregates_self


SECTIONS = {  # config section -> its dataclass, from the code that owns it (each is a field of DsgraphConfig)
    **{mode.section: mode.Config for mode in MODES.values() if mode.section is not None},
    **{task.section: task.Config for task in TASKS.values() if task.section is not None},
    "parallel": ParallelConfig,
    "agp": AgpConfig,
}


def _check_sections_declared() -> None:
    """Every owner's section is a field of ``DsgraphConfig`` of its type (where its docstring documents it)."""
    fields = {f.name: f.type for f in dataclasses.fields(DsgraphConfig)}
    for name, cls in SECTIONS.items():
        if fields.get(name) != cls.__name__:
            field = f"{name}: {cls.__name__}"
            raise TypeError(f"config section '{name}' needs the field '{field}' in DsgraphConfig")


_check_sections_declared()


def with_overrides(cfg: DsgraphConfig, overrides: dict, source: str = "command line") -> DsgraphConfig:
    """``cfg`` with the keys of ``overrides`` (either spelling of a section's key) in place of its
    values; a section given as an object replaces only the keys it names."""
    merged = cfg.to_dict()
    for name, value in _nest_flat_keys(overrides, source).items():
        merged[name] = {**merged[name], **value} if name in SECTIONS and isinstance(value, dict) else value
    return DsgraphConfig.from_dict(merged, source)


def _nest_flat_keys(section: dict, source: str) -> dict:
    """Moves the older top-level spellings of the sections' keys into their sections (a key given both
    ways is an error that names both)."""
    section = dict(section)
    for name, cls in SECTIONS.items():
        flat = {old: new for old, new in cls.FLAT_KEYS.items() if old in section}
        if not flat:
            continue
        nested = section.get(name, {})
        if not isinstance(nested, dict):
            raise ValueError(f"{source}: \"dsgraph\" key '{name}' must be a JSON object, got {nested!r}")
        nested = dict(nested)
        for old, new in flat.items():
            if new in nested:
                raise ValueError(f"{source}: '{old}' and '{name}.{new}' are the same setting; keep one")
            nested[new] = section.pop(old)
        section[name] = nested
    return section


def _section(cls, data: dict, name: str):
    """A mode's section from its JSON object: unknown keys and wrong types are errors that name them."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(
            f"dsgraph config: unknown key(s) {', '.join(repr(k) for k in unknown)} in '{name}'; "
            f"valid keys: {', '.join(fields)}"
        )
    for key, value in data.items():
        _check_type(f"{name}.{key}", value, fields[key].type, "dsgraph config")
    try:
        return cls(**data)
    except ValueError as err:
        raise ValueError(f"dsgraph config: '{name}': {err}") from None


def _check_mode_sections(cfg: DsgraphConfig) -> None:
    """What the run's mode (its ``check_config``) needs of the rest of the run."""
    try:
        MODES[cfg.mode].check_config(cfg)
    except ValueError as err:
        raise ValueError(f"dsgraph config: {err}") from None


def _check_task(cfg: DsgraphConfig) -> None:
    """A registered task, and what it needs of the run (``Task.check_config``: metric, mode, ...)."""
    if cfg.task not in task_names():
        raise ValueError(f"dsgraph config: 'task' must be one of {', '.join(task_names())}; got '{cfg.task}'")
    try:
        get_task(cfg.task).check_config(cfg)
    except ValueError as err:
        raise ValueError(f"dsgraph config: {err}") from None


def _check_strategy_and_mode(cfg: DsgraphConfig) -> None:
    """A registered strategy and mode (the older spellings 'strategy': 'sampled' | 'isolated' become
    the mode), and data a strategy can run on."""
    modes = mode_names()
    if cfg.strategy in modes and cfg.strategy != DEFAULT_MODE:
        if cfg.mode not in (DEFAULT_MODE, cfg.strategy):
            raise ValueError(f"dsgraph config: 'strategy' '{cfg.strategy}' is a mode, but 'mode' says '{cfg.mode}'")
        cfg.mode, cfg.strategy = cfg.strategy, DEFAULT_STRATEGY
    if cfg.mode not in modes:
        raise ValueError(f"dsgraph config: 'mode' must be one of {', '.join(modes)}; got '{cfg.mode}'")
    if cfg.strategy not in strategy_names():
        others = ", ".join(m for m in modes if m != DEFAULT_MODE)
        raise ValueError(
            f"dsgraph config: 'strategy' must be one of {', '.join(strategy_names())} (or a mode: {others}); "
            f"got '{cfg.strategy}'"
        )
    _check_edge_values(cfg)
    needs = get_strategy(cfg.strategy).needs
    if cfg.partitions is not None and needs is Needs.WHOLE_GRAPH:
        readers = [n for n in strategy_names() if get_strategy(n).needs is not Needs.WHOLE_GRAPH]
        raise ValueError(
            f"dsgraph config: strategy '{cfg.strategy}' needs {needs.value}, but 'partitions' loads one part per "
            f"rank; use one of {', '.join(readers)} with partitions, or drop 'partitions'"
        )


def _check_edge_values(cfg: DsgraphConfig) -> None:
    """Edge-conditioned values run where the attention takes per-edge values: the strategies that
    say so, and modes whose attention runs no strategy (sampled: a batch's attention is local,
    GP-AG's), on every backend (whether the task reads edge features at all is its own check)."""
    if cfg.model.edge_features != "bias_value":
        return
    takes = [n for n in strategy_names() if get_strategy(n).edge_values]
    if MODES[cfg.mode].uses_strategy and not get_strategy(cfg.strategy).edge_values:
        raise ValueError(
            f"dsgraph config: model.edge_features 'bias_value' (edge-conditioned values) runs with strategy "
            f"{' or '.join(takes)}, not '{cfg.strategy}'; or use model.edge_features 'bias'"
        )


def _check_preempt_signals(names: list[str]) -> None:
    from dsgraph.train.preemption import SIGNALS

    for name in names:
        if name not in SIGNALS:
            raise ValueError(
                f"dsgraph config: 'preempt_signals' entries must be among {', '.join(SIGNALS)}; got {name!r}"
            )


def _check_fault_actions(cfg: DsgraphConfig) -> None:
    from dsgraph.train.nonfinite import ACTIONS as NONFINITE
    from dsgraph.train.save_guard import ACTIONS as SAVE

    if cfg.checkpoint_failure not in SAVE:
        raise ValueError(
            f"dsgraph config: 'checkpoint_failure' must be one of {', '.join(SAVE)}; got {cfg.checkpoint_failure!r}"
        )
    if cfg.nonfinite not in NONFINITE:
        raise ValueError(f"dsgraph config: 'nonfinite' must be one of {', '.join(NONFINITE)}; got {cfg.nonfinite!r}")
    if not 0.0 < cfg.nonfinite_lr_factor < 1.0:
        raise ValueError(f"dsgraph config: 'nonfinite_lr_factor' must be in (0, 1), got {cfg.nonfinite_lr_factor}")
    if cfg.nonfinite == "rollback" and not cfg.checkpoint_every:
        raise ValueError("dsgraph config: 'nonfinite': 'rollback' reloads a checkpoint; set 'checkpoint_every'")


def parse_trace_steps(spec: str) -> tuple[int, int]:
    """'A:B' -> (A, B) with 0 <= A < B: trace steps A..B-1 (0-based epochs of this run)."""
    try:
        a, b = (int(x) for x in spec.split(":"))
    except ValueError:
        raise ValueError(f"dsgraph config: 'trace_steps' must look like A:B (for example 3:5), got {spec!r}") from None
    if not 0 <= a < b:
        raise ValueError(f"dsgraph config: 'trace_steps' A:B needs 0 <= A < B, got {spec!r}")
    return a, b


_TYPES = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str | None": (str, type(None)),
    "list[int]": (list,),
    "list[str]": (list,),
    "ModelOptions": (dict, ModelOptions),
    "int | None": (int, type(None)),
}
_TYPES.update({cls.__name__: (dict, cls) for cls in SECTIONS.values()})  # a section: a JSON object (or its dataclass)


def _check_type(key: str, value, type_name: str, source: str) -> None:
    allowed = _TYPES[type_name]
    if type_name == "list[int]" and isinstance(value, list) and not all(type(v) is int for v in value):
        allowed = ()
    if type_name == "list[str]" and isinstance(value, list) and not all(type(v) is str for v in value):
        allowed = ()
    if isinstance(value, bool) and bool not in allowed:
        allowed = ()
    if not isinstance(value, allowed):
        what = "a JSON object" if type_name in ("ModelOptions", *(c.__name__ for c in SECTIONS.values())) else type_name
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
        raise ValueError(
            f"{path}: remove 'sequence_parallel_size'; dsgraph's graph parallelism is not DeepSpeed sequence "
            "parallelism"
        )
    section = config.pop("dsgraph", {})
    return config, DsgraphConfig.from_dict(section, source=path)
