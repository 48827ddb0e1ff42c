"""A system of nodes: ranks per node, an intra-node and an inter-node tier, and collectives over
P = n x g ranks (n nodes of g ranks) composed from the two tiers the way NCCL moves the bytes.

The tiers (each labelled ``measured`` or ``projected``, with its source):

- **intra**: the profile's own per-p fits (``ranks`` 1..g): a collective among the g ranks of one
  node, ``f_c(m)`` seconds for a per-rank message of m bytes (NVLink/NVSwitch on a DGX);
- **inter**: one link between nodes (a NIC, one direction), ``link(b)`` seconds to move b bytes
  through it, latency included; ``links_per_node`` = r links per node (a DGX H100 has one
  400 Gb/s ConnectX-7 per GPU, r = g = 8, "rails").

Bus-bandwidth bookkeeping (nccl-tests, doc/PERFORMANCE.md): for S bytes in all, algbw = S / t and
busbw = algbw x 2(P-1)/P for all-reduce, x (P-1)/P for all-gather, reduce-scatter and all-to-all;
busbw is what a link must carry, so it is comparable with a link's bandwidth. Here x is the per-rank
message (S = P x for all-gather and all-to-all). The composition, for P = n g ranks, n > 1:

**Ring all-gather / reduce-scatter** (NCCL's ring; nodes contiguous in the ring, one ring channel
per rail). The ring takes P - 1 steps; in each, every link of every channel carries its share of one
x-byte chunk, so a step lasts as long as the slower tier's share::

    t = (P - 1) * max(f_c(x) / (g - 1),  link(x / r))

``f_c(x) / (g - 1)`` is one step of the measured g-rank ring (its busbw); ``link(x / r)`` is one
step through a node's r links. Bytes across the slow tier: each chunk enters every node but its
own once, and its own node too unless it started at the node's first rank, so a node receives
(P - 1) x, i.e. (P - 1) / P of the data S (a two-level gather would need only (n - 1) / n of it, but
leaves the links idle while the node gathers; on a DGX both tiers' busbw are ~360 GB/s, and the ring
keeps both busy). Per rank: (P - 1) x / g.

**All-to-all** (NCCL: P - 1 concurrent send/receive pairs). Of a rank's x bytes, x / P go to each
rank: (g - 1) x / P stay in the node, (P - g) x / P = (n - 1) x / n leave it through the rank's rail
(g / r ranks share one link). Both run at once::

    t = max(f_a2a(x / n),  link((n - 1) / n * x * g / r))

(the g-rank all-to-all at message x / n sends exactly (g - 1) x / P off-rank). Per rank across the
slow tier: (n - 1) x / n.

**Uneven all-to-all** (the halo exchange) of x bytes of remote rows per rank, x_e of them from
other nodes (from the node-then-rank partition; without one, x_e = x (P - g) / (P - 1): remote rows
spread evenly over the other ranks)::

    t = max(f_uneven(x - x_e),  link(x_e * g / r))

**All-reduce** (not used by the strategies; for completeness): a ring reduce-scatter then a ring
all-gather of x / P-byte chunks, 2 (P - 1) steps in all: the 2(P-1)/P busbw factor.

Names ``intra:<c>`` and ``inter:<c>`` address one tier alone (for placement-aware variants):
``intra:c`` is f_c among a node's g ranks; ``inter:all_gather`` (and ``inter:reduce_scatter``) a ring
over n ranks, one per node, ``(n - 1) * link(x g / r)``; ``inter:all_to_all`` ``link((n - 1) / n * x g / r)``;
``inter:all_to_all_uneven`` ``link(x g / r)`` (x: bytes from other nodes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dsgraph.agp.fits import LogLogFit

STATUSES = ("measured", "projected")
RING = ("all_gather", "reduce_scatter")


@dataclass(frozen=True, slots=True)
class Tier:
    """One level of the system, where its figures came from."""

    name: str
    """What it is, e.g. 'NVLink 4 via NVSwitch (DGX H100)'."""
    status: str
    """'measured' (fitted on the machine) or 'projected' (from published figures and assumptions)."""
    source: str
    """Where the figures came from: a measurement command and date, or the publications used."""
    figures: dict = field(default_factory=dict)
    """The published figures and stated assumptions behind a projected tier (free form)."""

    def label(self) -> str:
        return f"{self.name}: {self.status} ({self.source})"


@dataclass(frozen=True, slots=True)
class InterTier(Tier):
    """The links between nodes."""

    links_per_node: int = 1
    """r: inter-node links (NICs) per node, each used in one direction by a ring step."""
    link: LogLogFit | None = None
    """Seconds to move b bytes through one link in one direction, latency included."""


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Nodes of ``ranks_per_node`` ranks: the intra tier is the profile's per-p fits up to that count."""

    ranks_per_node: int
    intra: Tier
    inter: InterTier
    compute: Tier | None = None
    """Where the attention and dense-layer fits came from (measured or projected)."""

    def to_dict(self) -> dict:
        def tier(t: Tier) -> dict:
            return {
                "name": t.name,
                "status": t.status,
                "source": t.source,
                **({"figures": t.figures} if t.figures else {}),
            }

        out = {
            "ranks_per_node": self.ranks_per_node,
            "intra": tier(self.intra),
            "inter": {
                **tier(self.inter),
                "links_per_node": self.inter.links_per_node,
                "link": self.inter.link.to_dict(),
            },
        }
        if self.compute is not None:
            out["compute"] = tier(self.compute)
        return out

    def labels(self) -> list[str]:
        """One line per tier: what it is, measured or projected, and the source."""
        lines = [
            f"intra-node ({self.ranks_per_node} ranks): {self.intra.label()}",
            f"inter-node ({self.inter.links_per_node} links per node): {self.inter.label()}",
        ]
        if self.compute is not None:
            lines.insert(0, f"compute: {self.compute.label()}")
        return lines


def _tier_fields(d, where: str) -> dict:
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be an object with name, status and source")
    for key in ("name", "source"):
        if not isinstance(d.get(key), str) or not d[key]:
            raise ValueError(f"{where}.{key} must be a non-empty string, got {d.get(key)!r}")
    if d.get("status") not in STATUSES:
        raise ValueError(f"{where}.status must be one of {', '.join(STATUSES)}, got {d.get('status')!r}")
    figures = d.get("figures", {})
    if not isinstance(figures, dict):
        raise ValueError(f"{where}.figures must be an object, got {figures!r}")
    return {"name": d["name"], "status": d["status"], "source": d["source"], "figures": figures}


def hierarchy_from_dict(d, covered_ranks, where: str) -> Hierarchy:
    """Validates a profile's ``hierarchy`` section; ``covered_ranks``: the rank counts of its fits."""
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be an object with ranks_per_node, intra and inter")
    g = d.get("ranks_per_node")
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise ValueError(f"{where}.ranks_per_node must be a positive integer, got {g!r}")
    if g not in covered_ranks or (g > 1 and not all(p in covered_ranks for p in range(2, g + 1))):
        raise ValueError(
            f"{where}.ranks_per_node is {g}, but the profile's fits cover rank counts {sorted(covered_ranks)}; "
            f"the intra-node tier needs fits for every p = 1..{g}"
        )
    inter = d.get("inter")
    fields = _tier_fields(inter, f"{where}.inter")
    r = inter.get("links_per_node")
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise ValueError(f"{where}.inter.links_per_node must be a positive integer, got {r!r}")
    if "link" not in inter:
        raise ValueError(f"{where}.inter has no 'link' fit (seconds against bytes through one link)")
    link = LogLogFit.from_dict(inter["link"], f"{where}.inter.link")
    compute = Tier(**_tier_fields(d["compute"], f"{where}.compute")) if "compute" in d else None
    return Hierarchy(
        g,
        Tier(**_tier_fields(d.get("intra"), f"{where}.intra")),
        InterTier(**fields, links_per_node=r, link=link),
        compute,
    )


# --- the composition (pure functions of the two tiers' fits) ------------------------------------------


def ring_time(intra_fit, link: LogLogFit, x: float, nodes: int, g: int, r: int) -> float:
    """Ring all-gather / reduce-scatter of x bytes per rank over nodes x g ranks (module docstring)."""
    if x <= 0:
        return 0.0
    p = nodes * g
    intra_step = intra_fit(x) / (g - 1) if g > 1 else 0.0
    return (p - 1) * max(intra_step, link(x / r) if nodes > 1 else 0.0)


def all_to_all_time(intra_fit, link: LogLogFit, x: float, nodes: int, g: int, r: int) -> float:
    """All-to-all of x bytes per rank (x / P to each rank) over nodes x g ranks."""
    if x <= 0:
        return 0.0
    intra = intra_fit(x / nodes) if g > 1 else 0.0
    return max(intra, link((nodes - 1) / nodes * x * g / r))


def uneven_time(intra_fit, link: LogLogFit, x: float, x_inter: float, g: int, r: int) -> float:
    """Uneven all-to-all: x bytes of remote rows per rank, x_inter of them from other nodes."""
    if x <= 0:
        return 0.0
    x_inter = min(max(x_inter, 0.0), x)
    intra = intra_fit(x - x_inter) if g > 1 else 0.0
    return max(intra, link(x_inter * g / r))


def inter_bytes(name: str, x: float, nodes: int, g: int, x_inter: float | None = None) -> float:
    """Bytes one rank's share of the collective sends across the slow tier (module docstring)."""
    p = nodes * g
    if nodes <= 1 or x <= 0:
        return 0.0
    if name in RING:
        return (p - 1) * x / g
    if name == "all_reduce":
        return 2 * (p - 1) * (x / p) / g
    if name == "all_to_all":
        return (nodes - 1) * x / nodes
    if name == "all_to_all_uneven":
        return default_inter(x, nodes, g) if x_inter is None else min(x_inter, x)
    if name.startswith("intra:"):
        return 0.0
    if name in ("inter:all_gather", "inter:reduce_scatter"):
        return (nodes - 1) * x
    if name == "inter:all_to_all":
        return (nodes - 1) * x / nodes
    if name == "inter:all_to_all_uneven":
        return x
    raise KeyError(name)


def default_inter(x: float, nodes: int, g: int) -> float:
    """Of x bytes of remote rows, the share from other nodes when they spread evenly over the other
    ranks: (P - g) / (P - 1)."""
    p = nodes * g
    return x * (p - g) / (p - 1) if p > 1 else 0.0


class TieredCollective:
    """One collective on P = nodes x g ranks: ``(x)`` seconds for x bytes per rank; ``split(x, x_inter)``
    for an uneven all-to-all whose cross-node share is known; ``inter_bytes(x, x_inter)``."""

    def __init__(self, name: str, intra: Mapping, link: LogLogFit, nodes: int, g: int, r: int):
        self.name, self.intra, self.link, self.nodes, self.g, self.r = name, intra, link, nodes, g, r

    def _intra(self, c: str):
        return self.intra[c] if self.g > 1 else (lambda x: 0.0)

    def __call__(self, x: float) -> float:
        return self.split(x, None)

    def split(self, x: float, x_inter: float | None) -> float:
        name, n, g, r, link = self.name, self.nodes, self.g, self.r, self.link
        if name in RING:
            return ring_time(self._intra(name), link, x, n, g, r)
        if name == "all_reduce":
            return ring_time(self._intra("reduce_scatter"), link, x / (n * g), n, g, r) + ring_time(
                self._intra("all_gather"), link, x / (n * g), n, g, r
            )
        if name == "all_to_all":
            return all_to_all_time(self._intra(name), link, x, n, g, r)
        if name == "all_to_all_uneven":
            return uneven_time(self._intra(name), link, x, default_inter(x, n, g) if x_inter is None else x_inter, g, r)
        if name.startswith("intra:"):
            return self._intra(name.split(":", 1)[1])(x) if x > 0 else 0.0
        if name in ("inter:all_gather", "inter:reduce_scatter"):
            return (n - 1) * link(x * g / r) if x > 0 else 0.0
        if name == "inter:all_to_all":
            return link((n - 1) / n * x * g / r) if x > 0 else 0.0
        if name == "inter:all_to_all_uneven":
            return link(x * g / r) if x > 0 else 0.0
        raise KeyError(name)

    def inter_bytes(self, x: float, x_inter: float | None = None) -> float:
        return inter_bytes(self.name, x, self.nodes, self.g, x_inter)


NAMES = (*RING, "all_to_all", "all_to_all_uneven", "all_reduce")
TIER_NAMES = tuple(f"intra:{c}" for c in ("all_gather", "reduce_scatter", "all_to_all", "all_to_all_uneven")) + (
    "inter:all_gather",
    "inter:reduce_scatter",
    "inter:all_to_all",
    "inter:all_to_all_uneven",
)


class ComposedCollectives(Mapping):
    """The collectives of ``nodes`` x g ranks, by name (the profile's names, ``all_reduce``, and the
    ``intra:``/``inter:`` names of one tier); each a ``TieredCollective``."""

    def __init__(self, hierarchy: Hierarchy, intra: Mapping, nodes: int):
        g, inter = hierarchy.ranks_per_node, hierarchy.inter
        self.nodes, self.ranks_per_node = nodes, g
        self._items = {
            c: TieredCollective(c, intra, inter.link, nodes, g, inter.links_per_node) for c in (*NAMES, *TIER_NAMES)
        }

    def __getitem__(self, name: str) -> TieredCollective:
        return self._items[name]

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def node_count(p: int, g: int) -> int | None:
    """Nodes for p ranks of g per node: p / g when it divides (full nodes), else None."""
    return p // g if p % g == 0 else None
