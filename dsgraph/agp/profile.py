"""The AGP system profile: a JSON file with the measured alpha and beta fits of one system.

Schema (``format`` "dsgraph-agp-profile", ``version`` 1)::

    {
      "format": "dsgraph-agp-profile", "version": 1,
      "backend": "cpu", "dtype": "float32", "heads": 8, "head_dim": 16, "ffn_mult": 2,
      "system": {"description": "...", "memory_capacity_bytes": 1.3e11, "memory_shared_by_ranks": true, ...},
      "ranks": {
        "1": {"attention": FIT, "rest": FIT, "head_dim_knee": 12.5, "copy": FIT},
        "2": {"attention": FIT, "rest": FIT,
              "collectives": {"all_gather": FIT, "reduce_scatter": FIT, "all_to_all": FIT, "all_to_all_uneven": FIT},
              "head_dim_knee": 12.5, "copy": FIT},
        ...
      }
    }

FIT is a ``LogLogFit`` (log_a, slope, r2, points); a collective's FIT may instead be a
``LatencyBandwidthFit`` ({"model": "latency_bandwidth", latency_s, s_per_byte, r2, points}), which
``dsgraph profile`` writes since 2026-12-04, ``rest`` a ``RestFit`` ({"model": "macs_values_cache",
s_per_mac, s_per_value, s_per_missed_value, s_per_layer, cache_values, r2, points [[node-MACs,
node-values, seconds], ...]}) and ``attention`` an ``AttentionFit`` ({"model": "gather_cache",
s_per_edge, s_per_edge_head, s_per_missed_edge_head, s_per_row_head, s_per_source_row_head,
s_per_call, cache_row_heads, r2, points [[edges, edge-heads, row-heads, source row-heads, seconds],
...]}), the forms it writes since 2026-12-05 (evening). Earlier forms still load and predict as
they did: a log-log ``rest`` or ``attention``, ``rest`` "macs_values" (2026-12-04) and
``attention`` "edges_heads_rows" (2026-12-05), read with their missing terms 0.
Units of x: a log-log ``attention`` edge-heads (one edge for one head of dimension ``head_dim``, forward plus
backward, per rank while all p ranks compute at once); ``rest`` one Transformer block's node-MACs
(a node times d^2 * (4 + 2 * ffn_mult) multiply-adds: the QKV, output and FFN projections, forward
plus backward) and node-values (a node times d: the element-wise work); collectives bytes sent per
rank (the per-rank input of all-gather and all-to-all, the per-rank output of reduce-scatter).

``copy`` (optional; written since 2026-12-05, night) is a ``LatencyBandwidthFit`` of seconds against
values written by a copy of rows into another layout, per rank while all p ranks copy at once: the
price of a strategy's own tensor work around its kernels (``CostTerms.copied_values``). Profiles
without it predict without that work.

``head_dim_knee`` (optional; 0 when absent) is delta in: one (edge, head) of head dimension D costs
in proportion to delta + D (measured from the attention times at D and 2D).

``hierarchy`` (optional; absent in single-tier profiles, which load as before) describes a system of
nodes, each tier labelled measured or projected with its source (``tiers.py``)::

    "hierarchy": {
      "ranks_per_node": 8,
      "compute": {"name": "...", "status": "projected", "source": "..."},
      "intra": {"name": "NVLink 4 / NVSwitch", "status": "projected", "source": "...", "figures": {...}},
      "inter": {"name": "8 x 400 Gb/s InfiniBand NDR", "status": "projected", "source": "...",
                "links_per_node": 8, "link": FIT, "figures": {...}}
    }

The intra tier's fits are ``ranks`` 1..ranks_per_node; ``inter.link`` is seconds against bytes
through one inter-node link. With it the profile covers every multiple of ``ranks_per_node``:
``fits(p)`` composes the collectives of p = n x g ranks from the two tiers, and takes the per-rank
compute of p = g (one device per rank computes as fast beside more nodes).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field

from dsgraph.agp.fits import (
    AttentionFit,
    LatencyBandwidthFit,
    LogLogFit,
    RestFit,
    attention_from_dict,
    fit_from_dict,
    rest_from_dict,
)
from dsgraph.agp.tiers import ComposedCollectives, Hierarchy, Tier, hierarchy_from_dict, node_count

FORMAT = "dsgraph-agp-profile"
VERSION = 1
COLLECTIVES = ("all_gather", "reduce_scatter", "all_to_all", "all_to_all_uneven")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}


@dataclass(frozen=True, slots=True)
class RankFits:
    """The fits measured with ``p`` ranks running at once."""

    attention: LogLogFit | AttentionFit
    """The attention kernel: ``AttentionFit``, or an old profile's log-log line of edge-heads."""
    rest: LogLogFit | RestFit
    """The rest of a layer: ``RestFit``, or an old profile's log-log line of node-MACs."""
    collectives: dict[str, LogLogFit | LatencyBandwidthFit] = field(default_factory=dict)
    head_dim_knee: float = 0.0
    """delta: one (edge, head) of head dimension D costs in proportion to delta + D (0: to D)."""
    copy: LatencyBandwidthFit | None = None
    """Seconds against values written by a copy into another layout (what a strategy's own tensor
    work around its kernels costs per value, ``CostTerms.copied_values``); None in profiles written
    before it: that work is then not priced."""


@dataclass(frozen=True, slots=True)
class Profile:
    backend: str
    """Sparse attention backend the alpha fits were measured with (cpu, cuda, reference)."""
    dtype: str
    """Activation dtype of the measurements (float32 or bfloat16)."""
    heads: int
    head_dim: int
    ffn_mult: int
    system: dict
    """Free-form description; ``memory_capacity_bytes`` and ``memory_shared_by_ranks`` are read."""
    ranks: dict[int, RankFits]
    source: str = "<memory>"
    hierarchy: Hierarchy | None = None
    """Nodes and tiers (None: a single-tier profile, covering only the rank counts of ``ranks``)."""

    @property
    def max_ranks(self) -> int:
        """The largest rank count with fits of its own (measured or projected on one tier)."""
        return max(self.ranks)

    def covers(self, p: int) -> bool:
        """True when ``fits(p)`` answers: a rank count of ``ranks``, or whole nodes of a hierarchy."""
        if p in self.ranks:
            return True
        h = self.hierarchy
        return h is not None and p > h.ranks_per_node and node_count(p, h.ranks_per_node) is not None

    def rank_counts(self, world_size: int) -> list[int]:
        """The rank counts up to ``world_size`` that the profile covers, ascending."""
        return [p for p in range(1, world_size + 1) if self.covers(p)]

    def nodes(self, p: int) -> int:
        """Nodes that p ranks span (1 without a hierarchy or within one node)."""
        h = self.hierarchy
        return 1 if h is None or p <= h.ranks_per_node else -(-p // h.ranks_per_node)

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def memory_capacity_bytes(self) -> float | None:
        cap = self.system.get("memory_capacity_bytes")
        return float(cap) if cap else None

    @property
    def memory_shared_by_ranks(self) -> bool:
        """True when all ranks share one memory (CPU processes on one host)."""
        return bool(self.system.get("memory_shared_by_ranks", False))

    def fits(self, p: int) -> RankFits:
        if p not in self.ranks and self.covers(p):
            g = self.hierarchy.ranks_per_node
            base = self.ranks[g]
            collectives = ComposedCollectives(self.hierarchy, base.collectives, p // g)
            return dataclasses.replace(base, collectives=collectives)
        if p not in self.ranks:
            if self.hierarchy is not None:
                g = self.hierarchy.ranks_per_node
                raise ValueError(
                    f"{self.source}: the profile covers rank counts {sorted(self.ranks)} and whole nodes of {g} "
                    f"ranks, not {p}; plan for a multiple of {g}"
                )
            raise ValueError(
                f"{self.source}: the profile covers rank counts {sorted(self.ranks)}, not {p}; "
                f"run `dsgraph profile --max-ranks {p}` on this system"
            )
        return self.ranks[p]

    def with_ranks_per_node(self, g: int) -> Profile:
        """The same system described as nodes of ``g`` ranks (the intra tier's fits must cover 1..g).
        ValueError for a single-tier profile (it has no inter-node tier to compose with)."""
        if self.hierarchy is None:
            raise ValueError(
                f"{self.source}: the profile has one tier (no 'hierarchy' section with an inter-node link), "
                "so it cannot describe nodes; add one (see tools/agp_projection.py and docs/agp/plans.md)"
            )
        if g == self.hierarchy.ranks_per_node:
            return self
        if not all(p in self.ranks for p in range(1, g + 1)):
            raise ValueError(
                f"{self.source}: ranks per node {g} needs intra-node fits for p = 1..{g}, "
                f"but the profile has {sorted(self.ranks)}"
            )
        return dataclasses.replace(self, hierarchy=dataclasses.replace(self.hierarchy, ranks_per_node=g))

    def check_matches(self, backend: str | None = None, dtype: str | None = None) -> None:
        """ValueError when the profile was measured for another backend or dtype."""
        if backend is not None and backend != self.backend:
            raise ValueError(
                f"{self.source}: the profile was measured with the '{self.backend}' attention backend, "
                f"but this run uses '{backend}'; run `dsgraph profile --backend {backend}`"
            )
        if dtype is not None and dtype != self.dtype:
            raise ValueError(
                f"{self.source}: the profile was measured in {self.dtype}, but this run uses {dtype}; "
                f"run `dsgraph profile --dtype {dtype}`"
            )

    def to_dict(self) -> dict:
        ranks = {}
        for p, f in sorted(self.ranks.items()):
            entry = {"attention": f.attention.to_dict(), "rest": f.rest.to_dict()}
            if f.collectives:
                entry["collectives"] = {name: fit.to_dict() for name, fit in f.collectives.items()}
            if f.head_dim_knee:
                entry["head_dim_knee"] = f.head_dim_knee
            if f.copy is not None:
                entry["copy"] = f.copy.to_dict()
            ranks[str(p)] = entry
        return {
            "format": FORMAT,
            "version": VERSION,
            "backend": self.backend,
            "dtype": self.dtype,
            "heads": self.heads,
            "head_dim": self.head_dim,
            "ffn_mult": self.ffn_mult,
            "system": self.system,
            "ranks": ranks,
            **({"hierarchy": self.hierarchy.to_dict()} if self.hierarchy is not None else {}),
        }

    def save(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")

    def replace_ranks(self, ranks: dict[int, RankFits]) -> Profile:
        return Profile(
            self.backend,
            self.dtype,
            self.heads,
            self.head_dim,
            self.ffn_mult,
            self.system,
            ranks,
            self.source,
            self.hierarchy,
        )


def load_profile(path: str) -> Profile:
    """Reads and validates a profile JSON. FileNotFoundError when missing, ValueError when malformed."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such AGP profile; write one with `dsgraph profile --out {path}`")
    with open(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: the AGP profile is not valid JSON ({err})") from None
    return profile_from_dict(data, source=path)


def _non_negative(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < float("inf"):
        raise ValueError(f"{where} must be a non-negative number, got {value!r}")
    return float(value)


def _copy_fit(d, where: str) -> LatencyBandwidthFit | None:
    """A rank count's copy fit, or None where the profile has none."""
    if d is None:
        return None
    if not isinstance(d, dict) or d.get("model") != LatencyBandwidthFit.model:
        raise ValueError(f"{where}: expected a {LatencyBandwidthFit.model} fit, got {d!r}")
    return LatencyBandwidthFit.from_dict(d, where)


def profile_from_dict(data, source: str = "<profile>") -> Profile:
    """Validates a parsed profile; every error names ``source`` and the offending key."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f'{source}: not a dsgraph AGP profile (expected "format": "{FORMAT}")')
    if data.get("version") != VERSION:
        raise ValueError(
            f"{source}: profile version {data.get('version')!r} is not supported (this dsgraph reads version {VERSION})"
        )
    for key, kind in (
        ("backend", str),
        ("dtype", str),
        ("heads", int),
        ("head_dim", int),
        ("ffn_mult", int),
        ("system", dict),
        ("ranks", dict),
    ):
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise ValueError(f"{source}: key '{key}' must be a {kind.__name__}, got {data.get(key)!r}")
    if data["dtype"] not in DTYPE_BYTES:
        raise ValueError(f"{source}: dtype '{data['dtype']}' is not one of {', '.join(DTYPE_BYTES)}")
    ranks: dict[int, RankFits] = {}
    for key, entry in data["ranks"].items():
        if not key.isdigit() or int(key) < 1:
            raise ValueError(f"{source}: rank count key '{key}' under 'ranks' must be a positive integer")
        p = int(key)
        if not isinstance(entry, dict):
            raise ValueError(f"{source}: ranks.{key} must be an object")
        for part in ("attention", "rest"):
            if part not in entry:
                raise ValueError(f"{source}: ranks.{key} has no '{part}' fit")
        collectives = {}
        if p > 1:
            given = entry.get("collectives")
            if not isinstance(given, dict) or any(c not in given for c in COLLECTIVES):
                raise ValueError(f"{source}: ranks.{key}.collectives must hold fits for {', '.join(COLLECTIVES)}")
            collectives = {c: fit_from_dict(given[c], f"{source}: ranks.{key}.collectives.{c}") for c in COLLECTIVES}
        ranks[p] = RankFits(
            attention=attention_from_dict(entry["attention"], f"{source}: ranks.{key}.attention"),
            rest=rest_from_dict(entry["rest"], f"{source}: ranks.{key}.rest"),
            collectives=collectives,
            head_dim_knee=_non_negative(entry.get("head_dim_knee", 0.0), f"{source}: ranks.{key}.head_dim_knee"),
            copy=_copy_fit(entry.get("copy"), f"{source}: ranks.{key}.copy"),
        )
    if 1 not in ranks:
        raise ValueError(f"{source}: the profile has no single-rank fits (ranks.1)")
    hierarchy = hierarchy_from_dict(data["hierarchy"], ranks, f"{source}: hierarchy") if "hierarchy" in data else None
    return Profile(
        data["backend"],
        data["dtype"],
        data["heads"],
        data["head_dim"],
        data["ffn_mult"],
        data["system"],
        ranks,
        source,
        hierarchy,
    )


def with_collectives_from(measured: Profile, other: Profile, max_ranks: int) -> Profile:
    """``measured`` extended to rank counts up to ``max_ranks`` that it lacks: each such p takes
    its collective fits from ``other`` and its attention, rest and head_dim_knee from measured p = 1
    (one GPU per rank: a rank computes as fast with p - 1 others beside it as alone). The system
    section names ``other`` and which rank counts came from where. ValueError when ``other`` lacks
    one of those rank counts."""
    wanted = [p for p in range(2, max_ranks + 1) if p not in measured.ranks]
    if not wanted:
        return measured
    missing = [p for p in wanted if p not in other.ranks]
    if missing:
        raise ValueError(
            f"{other.source}: the collectives profile covers rank counts {sorted(other.ranks)}, but rank counts "
            f"{missing} are needed for --max-ranks {max_ranks}; pass a profile that covers them or lower --max-ranks"
        )
    base = measured.ranks[1]
    ranks = dict(measured.ranks)
    for p in wanted:
        ranks[p] = dataclasses.replace(base, collectives=dict(other.ranks[p].collectives))
    system = dict(measured.system)
    span = f"{wanted[0]}..{wanted[-1]}" if len(wanted) > 1 else str(wanted[0])
    system["description"] = f"{system.get('description', '')}; collectives for p = {span} from {other.source}"
    system["ranks_measured"] = sorted(measured.ranks)
    system["collectives_source"] = {
        "file": other.source,
        "description": other.system.get("description", ""),
        "ranks": wanted,
        "note": f"rank counts {wanted}: collective fits from {other.source}; "
        "attention and rest from the p = 1 measurement",
    }
    hierarchy = measured.hierarchy or other.hierarchy  # nodes of g ranks need fits for p = 1..g
    if hierarchy is not None and not all(p in ranks for p in range(1, hierarchy.ranks_per_node + 1)):
        hierarchy = None
    if hierarchy is not None and measured.hierarchy is None:  # the compute is this measurement now
        compute = Tier(
            measured.system.get("description", "") or measured.backend, "measured", f"{measured.source} (p = 1)"
        )
        hierarchy = dataclasses.replace(hierarchy, compute=compute)
    return Profile(
        measured.backend,
        measured.dtype,
        measured.heads,
        measured.head_dim,
        measured.ffn_mult,
        system,
        ranks,
        measured.source,
        hierarchy,
    )
