"""A training run's peak memory per rank, predicted from its config and its graph's sizes before
anything is loaded, and the refusal of a run predicted not to fit.

The sizes come from what is known without reading the graph: a partition store's META.json (exact
nodes, in-edges and halo of every part) or an ``rmat:SCALE[:EF]`` name (N = 2^SCALE, E about
``RMAT_KEPT`` x EF x N after removing duplicates, a halo of ``RMAT_HALO`` of a part's rows). The
prediction is the AGP memory model's terms (``model.memory_terms``: optimizer states, features,
the strategy's graph arrays and activations, checkpoints, the backward buffer) plus what a CPU rank
holds besides them:

- the process floor (``PROCESS_FLOOR_MB``): Python, torch, DeepSpeed, numba and the compiled kernels,
  the process group and DeepSpeed's engine: a rank's peak when its graph is tiny;
- what the CPU kernels keep (``CPU_TERMS``): per layer not checkpointed, the forward's log-sum-exp
  [n, H] in fp32, from which the CPU backward recomputes the probabilities (or p [e, H] itself where
  ``ops.cpu.KEEP_PROBABILITIES`` says so), ds [e, H] during a layer's backward (bfloat16 in a bf16
  run, ``ops.cpu.DS_IN_BF16``, else fp32), and the cached transpose of every attention subgraph
  (``ops/csc.py``: row, perm and slot indices, 12 bytes per edge in int32);
- before training, where the rows are split by METIS (the default of GP-Halo; not from a store),
  rank 0 reads the whole graph's structure and partitions it (``file_loading._partition``): that
  phase peaks at the process floor plus ``partition_choice.EDGE_BYTES`` per edge on rank 0, and the
  prediction is the larger of it and the training step (``RunMemory.loading``). A run whose METIS
  phase would not fit the limit, with no ``partition_method`` set, has its rows split into
  ``balanced`` ranges instead (``fit_run`` says so);
- what glibc's heap keeps (``allocator_heap``): while a rank's row tensors are smaller than
  ``HEAP_CEILING``, malloc serves them from its heap, and what a step frees there stays resident
  (fragmented, so not trimmed), so the peak is above the live bytes by ``HEAP_RETAINED`` times the
  step's terms. Larger blocks are mapped and unmapped one by one and leave nothing behind.

Full-graph runs of a named strategy are predicted here (``None`` otherwise: ``auto`` picks its
strategy after loading); ``predict_subgraph`` predicts a mode that trains one subgraph at a time
from that subgraph's sizes (from a store: isolated mode's chunk pair, ``modes/isolated/pair_memory.py``,
and sampled mode's mini-batch, ``modes/sampled/batch_memory.py``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from dsgraph.parallel.shapes import ModelShape

MB = 2**20
PROCESS_FLOOR_MB = 550.0
"""A CPU rank's peak with a tiny graph: Python, torch, DeepSpeed and numba imported, the process group
joined, the engine built and the kernels compiled (measured on 2 ranks of ``cpu_general.json``: Cora
556 / 547 MB; rmat:16-18 with glibc's heap kept small, ``MALLOC_MMAP_THRESHOLD_=131072``, within 3% of
this floor plus the terms)."""
HEAP_CEILING = 32 * MB
"""glibc's largest dynamic mmap threshold on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``): once a mapped
block is freed, malloc serves every block up to this size from its heap."""
HEAP_RETAINED = 1.15
"""What glibc's heap holds beyond the live tensors, as a share of a step's terms, when a rank's row
tensors are under ``HEAP_CEILING``: the peak with the default allocator less the peak with
``MALLOC_MMAP_THRESHOLD_=131072`` (which maps every block), over the step's terms, was 1.41, 1.33
and 1.22 on 2 ranks of ``cpu_general.json`` at rmat:16, 17 and 18, and 0.69 for isolated training of
rmat:20 from a 32-part store (``cpu_isolated.json``); nothing at rmat:19, whose bf16 rows are over
the ceiling. The middle of that spread keeps every one of those runs within 15%."""
LOADED_TERMS = ("process floor", "optimizer states", "features", "graph")
"""Terms allocated once, before the first step (the rest are a step's allocations)."""
RMAT_KEPT = 0.94
"""Share of an R-MAT graph's generated edges left after removing duplicates and self loops
(0.926 at rmat:17, 0.950 at rmat:19; edge factor 16)."""
RMAT_HALO = 0.46
"""Halo of a part of a balanced 2-way split of an R-MAT graph, as a share of its rows (0.44-0.52
measured at rmat:17-19): the hubs every part reads."""
LIMIT_ENV = "DSGRAPH_MEMORY_LIMIT_MB"
"""A per-rank memory limit in MB that overrides the config's and the machine's (tests, schedulers)."""


@dataclass(frozen=True)
class RunMemory:
    """Predicted peak bytes per rank of a run, by term (they sum to ``total_bytes``)."""

    terms: dict
    world_size: int
    strategy: str
    source: str
    """Where the graph's sizes came from (the store, or the R-MAT estimate)."""
    loading: float = 0.0
    """Peak bytes of rank 0 while it partitions the graph before training (0: no such phase)."""

    @property
    def step_bytes(self) -> float:
        """The training phase's peak: the sum of the terms."""
        return float(sum(self.terms.values()))

    @property
    def total_bytes(self) -> float:
        return max(self.step_bytes, self.loading)

    @property
    def total_mb(self) -> float:
        return self.total_bytes / MB

    def lines(self) -> list[str]:
        """One line per term, in MB, then the total."""
        out = [f"{name:<22} {value / MB:10,.0f} MB" for name, value in self.terms.items()]
        if self.loading:
            out += [
                f"{'training step':<22} {self.step_bytes / MB:10,.0f} MB",
                f"{'METIS on rank 0':<22} {self.loading / MB:10,.0f} MB (before training: floor + whole structure)",
            ]
        return out + [f"{'predicted peak':<22} {self.total_mb:10,.0f} MB per rank ({self.source})"]


def graph_sizes(cfg, world_size: int):
    """(GraphShape with the split the run uses at ``world_size``, feature width, classes, where the
    sizes came from), or None when the sizes are not known without loading the graph."""
    from dsgraph.parallel.shapes import GraphShape, SplitShape

    if cfg.partitions:
        from dsgraph.graph.store import read_meta

        meta = read_meta(cfg.partitions)
        if int(meta["num_parts"]) != world_size:
            return None  # the run refuses the mismatch itself, with its own message
        nodes = [int(hi) - int(lo) for lo, hi in meta["node_ranges"]]
        # the model's self loops: one per row (rows that have one already get none: at most n too many)
        edges = [int(e) + (n if cfg.self_loops else 0) for e, n in zip(meta["part_num_edges"], nodes)]
        halos = [int(h) for h in meta["part_num_halo"]]
        sends = [sum(halos) - h if world_size == 1 else (sum(halos) - h) // (world_size - 1) for h in halos]
        split = SplitShape(nodes, edges, halos, sends)
        shape = GraphShape(int(meta["num_nodes"]), sum(edges), rows={world_size: split})
        shape.partitions[world_size] = split
        return shape, int(meta["num_features"]), int(meta["num_classes"]), f"store {cfg.partitions}"
    if cfg.dataset.startswith("rmat:"):
        from dsgraph.graph.rmat import NUM_FEATURES, parse_rmat_spec, rmat_labels

        scale, edge_factor = parse_rmat_spec(cfg.dataset)
        n = 2**scale
        e = int(RMAT_KEPT * edge_factor * n) + (n if cfg.self_loops else 0)
        shape = GraphShape.from_counts(n, e, [world_size], RMAT_HALO * (world_size > 1) / max(world_size - 1, 1))
        shape.rows[world_size] = SplitShape.even(n, e, world_size)
        classes = rmat_labels(cfg.dataset) or 4
        return shape, NUM_FEATURES, classes, f"{cfg.dataset} estimated from its name"
    return None


def predict_run(cfg, dtype_bytes: int, world_size: int, sizes=None, device: str = "cpu") -> RunMemory | None:
    """The run's predicted peak per rank (``dtype_bytes``: 2 with bf16, else 4), or None when it is
    not predicted (see the module's docstring). ``sizes``: ``graph_sizes``'s answer when the caller
    measured the graph itself (a loaded graph that has no R-MAT name or store). ``device`` 'cuda':
    the accelerator's memory (the model's terms alone: no process floor, no CPU kernel terms)."""
    from dsgraph.agp.model import memory_terms
    from dsgraph.parallel.registry import get_strategy

    if cfg.mode != "full" or cfg.strategy == "auto" or cfg.model.reads_edges:
        return None
    sizes = sizes or graph_sizes(cfg, world_size)
    if sizes is None:
        return None
    shape, in_dim, classes, source = sizes
    model = ModelShape.of_config(cfg, in_dim, classes)
    spec = get_strategy(cfg.strategy)
    kinds = model.layer_kinds()
    all_terms = [spec.cost(world_size, shape, kind.shape, dtype_bytes) for kind in kinds]
    if any(isinstance(t, str) for t in all_terms):
        return None
    terms = memory_terms(kinds, all_terms, model, dtype_bytes, output_copy=device != "cpu")
    if device == "cpu":
        terms = {"process floor": PROCESS_FLOOR_MB * MB, **terms, **cpu_terms(kinds, all_terms, model, dtype_bytes)}
        row_bytes = max(t.rows for t in all_terms) * model.hidden * dtype_bytes
        terms["allocator heap"] = allocator_heap(terms, row_bytes)
    loading = metis_loading(cfg, spec, world_size, shape.num_edges) if device == "cpu" else 0.0
    return RunMemory(terms, world_size, cfg.strategy, source, loading)


def metis_loading(cfg, spec, world_size: int, num_edges: int) -> float:
    """Rank 0's peak bytes while it partitions the whole graph with METIS before training, or 0 when
    the run's rows are not split by METIS there (one rank, a partition store, another split)."""
    from dsgraph.graph.partition_choice import EDGE_BYTES

    if world_size == 1 or cfg.partitions or cfg.parallel.split_method(spec) != "metis":
        return 0.0
    return PROCESS_FLOOR_MB * MB + EDGE_BYTES * num_edges


def predict_subgraph(
    cfg, dtype_bytes: int, nodes: int, edges: int, in_dim: int, classes: int, source: str, *, read_ahead: bool
) -> RunMemory:
    """The peak per rank of training one subgraph of ``nodes`` rows (halo rows included) and ``edges``
    in-edges at a time, as isolated mode does with a chunk pair and sampled mode with a mini-batch:
    a one-rank full-graph step on it
    (the strategies agree at one rank; GP-AG's terms), plus, with ``read_ahead``, the next
    subgraph's features and graph arrays, read while this one trains."""
    from dsgraph.parallel.shapes import GraphShape, SplitShape

    split = SplitShape([nodes], [edges], [0], [0])
    shape = GraphShape(nodes, edges, rows={1: split})
    shape.partitions[1] = split
    one_rank = dataclasses.replace(cfg, mode="full", strategy="ag")
    memory = predict_run(one_rank, dtype_bytes, 1, sizes=(shape, in_dim, classes, source))
    terms = dict(memory.terms)
    if read_ahead:
        terms["read-ahead subgraph"] = terms["features"] + terms["graph"]
    return RunMemory(terms, 1, cfg.mode, source)


def cpu_terms(kinds, all_terms, model, dtype_bytes: int = 4) -> dict:
    """What the CPU kernels hold besides the model's terms (see the module's docstring)."""
    from dsgraph.ops.cpu import DS_IN_BF16, KEEP_PROBABILITIES

    ds_bytes = 2 if DS_IN_BF16 and dtype_bytes == 2 else 4
    edges = max(t.edge_heads for t in all_terms) / model.heads

    def kept_per_layer(kind, terms) -> float:  # p [e, H] fp32, or the lse [n, H] backward recomputes it from
        return terms.edge_heads * 4 if KEEP_PROBABILITIES else terms.rows * kind.shape.heads * 4

    kept = sum((kind.count - kind.checkpointed) * kept_per_layer(kind, t) for kind, t in zip(kinds, all_terms))
    recomputed = max((kept_per_layer(kind, t) for kind, t in zip(kinds, all_terms) if kind.checkpointed), default=0.0)
    return {
        "kept probabilities": kept + recomputed,
        "kernel transposes": 12.0 * edges,
        "kernel backward": ds_bytes * max(t.edge_heads for t in all_terms),
    }


def allocator_heap(terms: dict, row_bytes: float) -> float:
    """Bytes glibc's heap keeps beyond the live tensors (see the module's docstring): ``HEAP_RETAINED``
    times the step's terms when a row tensor (``row_bytes``: rows x hidden in the run's dtype) is
    smaller than ``HEAP_CEILING``, else nothing."""
    if row_bytes >= HEAP_CEILING:  # malloc maps a block of the threshold and more (its header included)
        return 0.0
    return HEAP_RETAINED * sum(value for name, value in terms.items() if name not in LOADED_TERMS)


def memory_limit_mb(cfg, local_ranks: int) -> tuple[float, str]:
    """(per-rank limit in MB, where it comes from): ``$DSGRAPH_MEMORY_LIMIT_MB``, the config's
    ``memory_limit_mb``, else the machine's available memory shared by the ranks on it."""
    env = os.environ.get(LIMIT_ENV)
    if env:
        try:
            return float(env), f"${LIMIT_ENV}"
        except ValueError:
            raise ValueError(f"${LIMIT_ENV} must be a number of MB, got {env!r}") from None
    if cfg.memory_limit_mb:
        return float(cfg.memory_limit_mb), "memory_limit_mb"
    from dsgraph.runtime.host_memory import available_memory_bytes

    share = available_memory_bytes() / MB / max(local_ranks, 1)
    return share, f"available memory / {local_ranks} ranks on this machine"


def alternatives(cfg, here: RunMemory, dtype_bytes: int, world_size: int, limit_mb: float) -> list[str]:
    """Settings predicted to fit under ``limit_mb`` per rank, for the run ``cfg`` predicted as ``here``:
    a balanced row split (when METIS' phase on rank 0 is what does not fit), more ranks (the graph's
    share divides, the floor and the optimizer states stay), activation checkpointing (nested), bf16,
    and isolated mode."""
    fixed = here.terms["process floor"] + here.terms["optimizer states"]
    out = []
    if here.loading > limit_mb * MB:
        balanced = predict_run(balanced_split(cfg), dtype_bytes, world_size)
        if balanced.total_mb <= limit_mb:
            chosen = ", which training chooses by itself" if cfg.parallel.partition_method is None else ""
            out.append(f"a balanced row split ({BALANCED_SETTING}{chosen}): about {balanced.total_mb:,.0f} MB per rank")
    for ranks in (2 * world_size, 4 * world_size, 8 * world_size):
        scaled = max(fixed + (here.step_bytes - fixed) * world_size / ranks, here.loading) / MB
        if scaled <= limit_mb:
            store = f" (a store of {ranks} parts: dsgraph partition --parts {ranks})" if cfg.partitions else ""
            out.append(f"{ranks} ranks: about {scaled:,.0f} MB per rank{store}")
            break
    changes = [('checkpointing ("checkpoint_activations": true, nested)', _nested(cfg), dtype_bytes)]
    if dtype_bytes != 2:
        changes += [('bf16 ("bf16": {"enabled": true})', {}, 2), ("checkpointing and bf16", _nested(cfg), 2)]
    for label, overrides, b in changes:
        if not overrides and b == dtype_bytes:
            continue
        other = predict_run(_with(cfg, overrides), b, world_size)
        if other is not None and other.total_mb <= limit_mb:
            out.append(f"{label}: about {other.total_mb:,.0f} MB per rank")
    out.append('isolated training ("mode": "isolated"): one chunk of the graph at a time')
    return out


BALANCED_SETTING = '"parallel": {"partition_method": "balanced"}'


def balanced_split(cfg):
    """``cfg`` with its rows split into balanced ranges (no partitioning before training)."""
    return dataclasses.replace(cfg, parallel=dataclasses.replace(cfg.parallel, partition_method="balanced"))


def _with(cfg, overrides: dict):
    """``cfg`` with top-level keys replaced (validated again by the config's ``__post_init__``)."""
    return dataclasses.replace(cfg, **overrides)


def _nested(cfg) -> dict:
    """The overrides that turn on checkpointing of every block (nested for Transformer blocks); {} when
    the config has it already or cannot (``parallel.regather_kv`` excludes it)."""
    if cfg.parallel.regather_kv:
        return {}
    if cfg.checkpoint_activations and (cfg.checkpoint_nested or cfg.model.block != "transformer"):
        return {}
    nested = cfg.model.block == "transformer"
    return {"checkpoint_activations": True, "checkpoint_every_layers": 1, "checkpoint_nested": nested}


def over_limit_message(predicted: RunMemory, run: str, limit: float, source: str, fits: list[str]) -> str:
    """A refusal: the prediction, the limit and where it comes from, and what is predicted to fit."""
    return (
        f"this run is predicted to peak at {predicted.total_mb:,.0f} MB per rank ({run}, {predicted.source}), "
        f"over the limit of {limit:,.0f} MB per rank ({source}); predicted to fit: {'; '.join(fits)}. "
        f"`dsgraph plan` shows the terms; set memory_limit_mb (or ${LIMIT_ENV}) to run anyway"
    )


def local_ranks(world_size: int) -> int:
    """Ranks on this machine, as the launcher announced them (deepspeed, torchrun, Open MPI, MPICH),
    else ``world_size`` (one machine)."""
    for var in ("LOCAL_SIZE", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return world_size


def fit_run(cfg, ds_config: dict, world_size: int):
    """(the config to run, a note for the log or ""): ``cfg`` itself when it is predicted to fit (or is
    not predicted); with its rows split into balanced ranges when METIS' phase on rank 0 is predicted
    over the limit and no ``partition_method`` was chosen; with activation checkpointing turned on
    (nested) when only that makes it fit and ``auto_checkpoint`` allows it. Raises ValueError (the
    prediction, the limit, what would fit) when nothing does; called on every rank of a CPU run
    before its graph is loaded."""
    b = dtype_bytes_of(ds_config)
    predicted = predict_run(cfg, b, world_size)
    if predicted is None:
        return cfg, ""
    limit, source = memory_limit_mb(cfg, local_ranks(world_size))
    notes = []
    if predicted.loading > limit * MB and cfg.parallel.partition_method is None:
        notes.append(
            f"METIS on rank 0 is predicted to peak at {predicted.loading / MB:,.0f} MB, over the limit of "
            f"{limit:,.0f} MB ({source}): the rows are split into balanced ranges instead (as {BALANCED_SETTING} "
            "would)"
        )
        cfg = balanced_split(cfg)
        predicted = predict_run(cfg, b, world_size)
    if predicted.total_mb <= limit:
        return cfg, "; ".join(notes)
    if cfg.auto_checkpoint and _nested(cfg):
        checkpointed = _with(cfg, _nested(cfg))
        after = predict_run(checkpointed, b, world_size)
        if after.total_mb <= limit:
            notes.append(
                f"predicted peak {predicted.total_mb:,.0f} MB per rank is over the limit of {limit:,.0f} MB "
                f"({source}): activation checkpointing turned on (nested), predicted {after.total_mb:,.0f} MB "
                '("auto_checkpoint": false keeps it off)'
            )
            return checkpointed, "; ".join(notes)
    fits = alternatives(cfg, predicted, b, world_size, limit)
    message = over_limit_message(predicted, f"{predicted.strategy} on {world_size} ranks", limit, source, fits)
    raise ValueError("; ".join([*notes, message]))  # what was already changed, then why it is not enough


def dtype_bytes_of(ds_config: dict) -> int:
    """2 when the DeepSpeed config enables bf16 or fp16, else 4."""
    enabled = any(isinstance(ds_config.get(k), dict) and ds_config[k].get("enabled") for k in ("bf16", "fp16"))
    return 2 if enabled else 4
