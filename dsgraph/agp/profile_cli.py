"""``dsgraph profile``: measure this system's alpha and beta and write the AGP profile JSON."""

from __future__ import annotations

import argparse
import sys
import time


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dsgraph profile",
        description="Measure fused attention time per edge-head and the rest of a layer per node (alpha), and "
        "all-gather, reduce-scatter, all-to-all and uneven all-to-all time per byte (beta) on 1..MAX_RANKS local "
        "gloo ranks; fit log-log lines and write a profile JSON for `dsgraph plan` and \"strategy\": \"auto\".",
    )
    p.add_argument("--out", default="agp_profile.json", help="profile JSON to write (default: agp_profile.json)")
    p.add_argument("--max-ranks", type=int, default=4, help="measure rank counts 1..MAX_RANKS (default 4)")
    p.add_argument("--heads", type=int, default=8, help="attention heads H of the measured layer (default 8)")
    p.add_argument("--head-dim", type=int, default=16, help="head dimension D (default 16)")
    p.add_argument("--ffn-mult", type=int, default=2, help="FFN width multiple (default 2)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--backend", choices=["auto", "reference", "cpu"], default="auto", help="attention backend (default: auto)")
    p.add_argument("--max-bytes", type=int, help="largest collective message in bytes (default: 4 MiB or what memory allows)")
    p.add_argument("--reps", type=int, default=3, help="round-robin repetitions per measurement; the minimum is kept (default 3)")
    p.add_argument("--threads", type=int, default=1, help="torch and numba threads per rank (default 1)")
    return p


def format_fits(profile) -> str:
    """The fit table: one line per (p, quantity) with slope, time at a reference size and R^2."""
    lines = [f"{'p':>2}  {'quantity':<18} {'slope':>6} {'R^2':>6}  time at reference size"]
    for p, fits in sorted(profile.ranks.items()):
        rows = [("attention", fits.attention, 2**20, "2^20 edge-heads"), ("rest", fits.rest, 2**30, "2^30 node-MACs")]
        rows += [(name, fit, 2**20, "1 MiB") for name, fit in fits.collectives.items()]
        for name, fit, x, unit in rows:
            lines.append(f"{p:>2}  {name:<18} {fit.slope:6.3f} {fit.r2:6.3f}  {fit(x) * 1e3:9.3f} ms at {unit}")
    knees = ", ".join(f"p={p}: {fits.head_dim_knee:.1f}" for p, fits in sorted(profile.ranks.items()))
    lines.append(f"head_dim_knee (an (edge, head) costs in proportion to knee + D): {knees}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from dsgraph.agp.measure import measure_profile

    began = time.perf_counter()
    try:
        profile = measure_profile(
            max_ranks=args.max_ranks, heads=args.heads, head_dim=args.head_dim, ffn_mult=args.ffn_mult,
            dtype=args.dtype, backend=args.backend, max_bytes=args.max_bytes, reps=args.reps, threads=args.threads,
        )  # fmt: skip
    except ValueError as err:
        print(f"dsgraph profile: error: {err}", file=sys.stderr)
        return 2
    profile.save(args.out)
    print(format_fits(profile))
    print(f"wrote {args.out} in {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
