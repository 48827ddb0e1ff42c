"""Profiles built from stated per-unit costs instead of measurements: for tests, and for projecting
a system that is not at hand from its published figures (see tools/reports/agp_projection.py).

Each quantity is ``latency + x * per_unit`` sampled at powers of two over a size range and fitted
in log-log space exactly as measured points are.
"""

from __future__ import annotations

from dsgraph.agp.fits import LogLogFit, fit_loglog
from dsgraph.agp.profile import COLLECTIVES, Profile, RankFits


def linear_fit(per_unit_s: float, latency_s: float, lo_exp: int, hi_exp: int) -> LogLogFit:
    """The log-log fit of ``t(x) = latency_s + per_unit_s * x`` sampled at x = 2^lo_exp .. 2^hi_exp."""
    return fit_loglog([(2.0**e, latency_s + per_unit_s * 2.0**e) for e in range(lo_exp, hi_exp + 1, 2)])


def linear_profile(
    *,
    max_ranks: int,
    attention_s_per_edge_head: float,
    rest_s_per_mac: float,
    collective_s_per_byte: dict[str, float],
    collective_latency_s: float = 2e-5,
    compute_latency_s: float = 1e-5,
    backend: str = "cuda",
    dtype: str = "float32",
    heads: int = 8,
    head_dim: int = 16,
    ffn_mult: int = 2,
    system: dict | None = None,
    bandwidth_scale=None,
) -> Profile:
    """A profile whose rank counts 1..max_ranks share the compute costs and whose collective at p
    ranks costs ``collective_s_per_byte[c] * bandwidth_scale(c, p)`` per byte (default scale 1)."""
    scale = bandwidth_scale or (lambda c, p: 1.0)
    missing = [c for c in COLLECTIVES if c not in collective_s_per_byte]
    if missing:
        raise ValueError(f"collective_s_per_byte needs {', '.join(missing)}")
    ranks = {}
    for p in range(1, max_ranks + 1):
        ranks[p] = RankFits(
            attention=linear_fit(attention_s_per_edge_head, compute_latency_s, 16, 36),
            rest=linear_fit(rest_s_per_mac, compute_latency_s, 20, 44),
            collectives={}
            if p == 1
            else {
                c: linear_fit(collective_s_per_byte[c] * scale(c, p), collective_latency_s, 10, 34) for c in COLLECTIVES
            },
        )
    return Profile(
        backend, dtype, heads, head_dim, ffn_mult, system or {"description": "synthetic"}, ranks, source="<synthetic>"
    )
