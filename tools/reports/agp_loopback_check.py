"""A check of the tier composition on this machine, from stored measurements only: the 4-rank
collectives composed as 2 loopback "nodes" of 2 ranks (``dsgraph/agp/tiers.py``) against the
measured 4-rank fits, and the validation sweep's measured 4-rank layers (docs/agp/sweep_raw.json)
predicted with either.

    python -m tools.reports.agp_loopback_check

The intra tier is the measured 2-rank fits of docs/agp/cpu_profile.json; the inter "link" is the
measured 2-rank all-to-all seen from one rank (m bytes per rank send m / 2 to the one peer, so
link(b) = f_a2a,2(2 b)), one per rank. Compute stays the measured 4-rank fits (4 ranks share the 2
cores, which no composition of 2-rank fits can know). This is not a two-launcher run (``--no_ssh``,
two process groups): it reuses one-machine measurements.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys

from dsgraph.agp.fits import LatencyBandwidthFit, LogLogFit
from dsgraph.agp.profile import RankFits, load_profile
from dsgraph.agp.tiers import ComposedCollectives, Hierarchy, InterTier, Tier

PROFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "agp", "cpu_profile.json")


def composed_profile(profile):
    """``profile`` with its 4-rank collectives replaced by 2 nodes of its 2-rank fits."""
    a2a = profile.ranks[2].collectives["all_to_all"]
    if isinstance(a2a, LatencyBandwidthFit):  # link(b) = f_a2a(2 b)
        link = LatencyBandwidthFit(a2a.latency_s, 2.0 * a2a.s_per_byte, a2a.r2)
    else:
        link = LogLogFit(a2a.log_a + a2a.slope * math.log(2.0), a2a.slope, a2a.r2)
    h = Hierarchy(
        2,
        Tier("loopback gloo, 2 ranks", "measured", "docs/agp/cpu_profile.json ranks 1-2"),
        InterTier(
            "loopback gloo between two 'nodes'",
            "measured",
            "the 2-rank all-to-all of docs/agp/cpu_profile.json",
            links_per_node=2,
            link=link,
        ),
    )
    four = profile.ranks[4]
    ranks = {
        1: profile.ranks[1],
        2: profile.ranks[2],
        4: RankFits(
            four.attention, four.rest, ComposedCollectives(h, profile.ranks[2].collectives, 2), four.head_dim_knee
        ),
    }
    return dataclasses.replace(profile, ranks=ranks, hierarchy=h)


def main(argv=None) -> int:
    from tools.reports import validate_agp

    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    measured_profile = load_profile(PROFILE)
    composed = composed_profile(measured_profile)
    print("4-rank collectives, measured fit vs composed from 2-rank fits (ms):")
    for name in ("all_gather", "reduce_scatter", "all_to_all", "all_to_all_uneven"):
        cells = []
        for size in (2**16, 2**20, 2**22):
            m, c = measured_profile.ranks[4].collectives[name](size), composed.ranks[4].collectives[name](size)
            cells.append(f"{size // 1024} KiB {m * 1e3:.2f} / {c * 1e3:.2f}")
        print(f"  {name:<18} " + "; ".join(cells))
    cfgs = validate_agp.configs("small")
    with open(os.path.join(os.path.dirname(PROFILE), "sweep_raw.json")) as f:  # the 2026-11-29 sweep: one run
        raw = {(0, p, i, s): (t, 0.0, 0.0) for p, i, s, t in json.load(f)["measured"]}
    for label, profile in (("measured 4-rank fits", measured_profile), ("composed 2 x 2", composed)):
        rows, _ = validate_agp.evaluate(cfgs, raw, profile, runs=1)
        errors = [
            abs(v["predicted_s"] - v["measured_s"]) / v["measured_s"]
            for r in rows
            for k, v in r["pairs"].items()
            if k.endswith("@4")
        ]
        hits = 0
        for r in rows:
            at = {k: v for k, v in r["pairs"].items() if k.endswith("@4")}
            pick, best = min(at, key=lambda k: at[k]["predicted_s"]), min(at, key=lambda k: at[k]["measured_s"])
            hits += at[pick]["measured_s"] <= 1.1 * at[best]["measured_s"]
        print(
            f"{label}: median |error| of the {len(errors)} measured 4-rank layers "
            f"{100 * statistics.median(errors):.1f}% "
            f"(mean {100 * statistics.fmean(errors):.1f}%); pick at p = 4 within 10% of the measured best in "
            f"{hits}/{len(rows)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
