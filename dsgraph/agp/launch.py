"""The rank count and strategy a training run launches with (``dsgraph train --nprocs auto``), and the
launch plan that carries that choice to the ranks.

Every (strategy, p) of ``auto_candidates()`` for p = 1..the machine's ranks is predicted twice: its
step time by the AGP model from the machine's profile (``model.predict``) and its peak memory per
rank by the run's memory model (``run_memory.predict_run``, on the CPU) or the AGP memory terms
against the device's memory (on GPUs). The pick is the fastest pair that fits; ties go to fewer
ranks. The plan is a JSON file: the launcher writes it, every rank reads it (``check_world``) and
refuses a world size other than the pick's, naming the command that launches the pick, and the
run's metrics carry its predictions beside the measured figures.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field

from dsgraph.agp.model import predict
from dsgraph.agp.run_memory import dtype_bytes_of, graph_sizes, memory_limit_mb, predict_run
from dsgraph.parallel import auto_candidates
from dsgraph.parallel.shapes import GraphShape, ModelShape

PLAN_VERSION = 1


@dataclass(frozen=True)
class Candidate:
    """One (strategy, ranks) pair: its predicted step time and peak memory per rank, and why it is
    out (``reason``: empty when it is a candidate)."""

    strategy: str
    ranks: int
    step_time_s: float
    peak_mb: float | None
    """Predicted peak per rank in MB (None: not predicted for this run, e.g. edge features)."""
    limit_mb: float
    reason: str = ""

    @property
    def feasible(self) -> bool:
        return not self.reason

    def line(self) -> str:
        time = f"{self.step_time_s * 1e3:10.1f}" if math.isfinite(self.step_time_s) else f"{'-':>10}"
        mem = f"{self.peak_mb:10,.0f}" if self.peak_mb is not None else f"{'?':>10}"
        return f"{self.ranks:>5} {self.strategy:<8} {time} {mem} {self.limit_mb:10,.0f}  {self.reason or 'ok'}"


TABLE_HEAD = f"{'ranks':>5} {'strategy':<8} {'step ms':>10} {'peak MB':>10} {'limit MB':>10}  status"


@dataclass(frozen=True)
class LaunchPlan:
    """The pick and what it was picked from; ``save``/``load`` as JSON."""

    strategy: str
    ranks: int
    step_time_s: float
    peak_mb: float | None
    dataset: str
    dtype: str
    profile: str
    candidates: list[dict] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    version: int = PLAN_VERSION

    def table(self) -> list[str]:
        return [TABLE_HEAD, "-" * len(TABLE_HEAD)] + [Candidate(**c).line() for c in self.candidates]

    def save(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(dataclasses.asdict(self), f, indent=1)

    @classmethod
    def load(cls, path: str) -> LaunchPlan:
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{path}: no such launch plan (`dsgraph train --nprocs auto --plan-only` writes one)"
            )
        try:
            with open(path) as f:
                data = json.load(f)
            if data.get("version") != PLAN_VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {PLAN_VERSION}")
            return cls(**data)
        except (json.JSONDecodeError, TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"{path}: not a launch plan of this dsgraph ({err})") from None


def run_dtype(ds_config: dict) -> str:
    """The profile dtype a run with this DeepSpeed config needs."""
    return "bfloat16" if dtype_bytes_of(ds_config) == 2 else "float32"


def _shape_at(cfg, p: int, loaded) -> tuple[GraphShape, int, int] | None:
    """The graph's shape with the splits the run uses at ``p`` ranks (the row split, and the partition
    of the strategies that need one), its feature width and classes: from the sizes known without
    loading (an R-MAT name, a store), else measured on ``loaded`` (the whole graph), else None."""
    sizes = graph_sizes(cfg, p)
    if sizes is not None:
        return sizes[:3]
    if loaded is None or cfg.partitions:
        return None
    method = (cfg.parallel.partition_method or "metis") if p > 1 else None  # the partition of halo (metis)
    shape = GraphShape.from_graph(loaded, [p], partition_method=method)
    if p == 1:
        shape.partitions[1] = shape.rows[1]
    return shape, loaded.num_features, loaded.num_classes


def candidates(
    cfg, ds_config: dict, profile, max_ranks: int, loaded=None, limit_of=None, device: str = "cpu"
) -> list[Candidate]:
    """Every (strategy, p) for p = 1..``max_ranks`` that ``profile`` covers (a partition store: its part
    count only). ``loaded``: the whole graph (with the run's self loops) when its sizes are not known
    from its name; ``limit_of(p)``: the per-rank memory limit in MB at p ranks on this machine
    (default ``memory_limit_mb``); ``device``: where the ranks run ('cuda': the accelerator's memory)."""
    b = dtype_bytes_of(ds_config)
    limit_of = limit_of or (lambda p: memory_limit_mb(cfg, p)[0])
    out = []
    for p in profile.rank_counts(max_ranks):
        at = _shape_at(cfg, p, loaded)
        if at is None:
            if cfg.partitions:
                continue  # a store is trained on as many ranks as it has parts
            raise ValueError(f"the sizes of dataset {cfg.dataset} are not known without loading it")
        shape, in_dim, classes = at
        limit = limit_of(p)
        for name in auto_candidates():
            run = dataclasses.replace(cfg, strategy=name)
            x = predict(name, p, shape, ModelShape.of_config(run, in_dim, classes), profile)
            memory = predict_run(run, b, p, sizes=(shape, in_dim, classes, "launch"), device=device)
            peak = None if memory is None else memory.total_mb
            reason = "" if x.feasible else x.reason
            if not reason and peak is not None and peak > limit:
                reason = f"predicted peak {peak:,.0f} MB over the limit of {limit:,.0f} MB per rank"
            out.append(Candidate(name, p, x.time_s, peak, limit, reason))
    if not out:
        raise ValueError(f"the profile {profile.source} covers none of the rank counts 1..{max_ranks} of this run")
    return out


def pick(cands: list[Candidate]) -> tuple[Candidate, list[str]]:
    """The fastest feasible candidate (fewer ranks on a tie) and the reasons a person can check.
    ValueError naming every candidate's reason when none fits."""
    ok = sorted((c for c in cands if c.feasible), key=lambda c: (c.step_time_s, c.ranks))
    if not ok:
        why = "; ".join(f"{c.strategy}@{c.ranks}: {c.reason}" for c in cands)
        raise ValueError(f"no (strategy, ranks) is predicted to fit and run: {why}")
    best = ok[0]
    reasons = [f"pick {best.strategy} on {best.ranks} ranks: predicted {best.step_time_s * 1e3:.1f} ms per step"]
    for other in ok[1:3]:
        slower = (other.step_time_s / best.step_time_s - 1) * 100
        reasons.append(
            f"next: {other.strategy} on {other.ranks} ranks, {other.step_time_s * 1e3:.1f} ms ({slower:+.0f}%)"
        )
    out = [c for c in cands if not c.feasible]
    if out:
        reasons.append(f"{len(out)} of {len(cands)} pairs ruled out (see the table)")
    return best, reasons


def plan_launch(
    cfg, ds_config: dict, profile, max_ranks: int, loaded=None, limit_of=None, device: str = "cpu"
) -> LaunchPlan:
    """The launch plan of a full-graph run (ValueError for another mode, or when nothing fits)."""
    if cfg.mode != "full":
        raise ValueError(
            f"--nprocs auto picks the ranks of full-graph runs; mode '{cfg.mode}' trains a batch or a chunk at a "
            "time: give --nprocs N"
        )
    profile.check_matches(dtype=run_dtype(ds_config))
    cands = candidates(cfg, ds_config, profile, max_ranks, loaded, limit_of, device)
    best, reasons = pick(cands)
    return LaunchPlan(
        best.strategy,
        best.ranks,
        best.step_time_s,
        best.peak_mb,
        cfg.dataset if cfg.partitions is None else cfg.partitions,
        profile.dtype,
        profile.source,
        [dataclasses.asdict(c) for c in cands],
        reasons,
    )


def check_world(plan: LaunchPlan, plan_path: str, cfg, world_size: int, relaunch: str):
    """The run's config with the plan's strategy, when the job has the plan's rank count and graph;
    ValueError otherwise, naming the command that launches the pick (``relaunch``)."""
    graph = cfg.dataset if cfg.partitions is None else cfg.partitions
    if graph != plan.dataset:
        raise ValueError(f"{plan_path} was made for {plan.dataset}, not {graph}: make a new plan for this graph")
    if world_size != plan.ranks:
        extra = "the extra ranks would only wait" if world_size > plan.ranks else "it would not fit or run slower"
        raise ValueError(
            f"{plan_path} picks {plan.strategy} on {plan.ranks} ranks, but this job has {world_size} ({extra}); "
            f"launch the pick: {relaunch}"
        )
    return dataclasses.replace(cfg, strategy=plan.strategy)


def describe(plan: LaunchPlan) -> str:
    mem = f", {plan.peak_mb:,.0f} MB per rank" if plan.peak_mb is not None else ""
    return f"{plan.strategy} on {plan.ranks} ranks (predicted {plan.step_time_s * 1e3:.1f} ms per step{mem})"


def predicted_step_time_s(cfg, dtype_bytes: int, world_size: int) -> float | None:
    """The AGP model's step time of the run's named strategy at its world size, for the metrics: the
    launch plan's (``agp.plan``) when it picked this strategy and rank count, else a prediction from
    ``agp.profile`` when the graph's sizes are known without loading it; None otherwise (no profile,
    or the profile is of another dtype)."""
    agp = cfg.agp
    if agp.plan:
        plan = LaunchPlan.load(agp.plan)
        if (plan.strategy, plan.ranks) == (cfg.strategy, world_size):
            return plan.step_time_s
    if not agp.profile or cfg.strategy == "auto":
        return None
    from dsgraph.agp.profile import load_profile

    profile = load_profile(agp.profile)
    sizes = graph_sizes(cfg, world_size)
    want = "bfloat16" if dtype_bytes == 2 else "float32"
    if sizes is None or profile.dtype != want or not profile.covers(world_size):
        return None
    shape, in_dim, classes, _ = sizes
    x = predict(cfg.strategy, world_size, shape, ModelShape.of_config(cfg, in_dim, classes), profile)
    return x.time_s if x.feasible else None
