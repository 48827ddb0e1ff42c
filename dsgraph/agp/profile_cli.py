"""``dsgraph profile``: measure this system's alpha and beta and write the AGP profile JSON."""

from __future__ import annotations

import argparse
import sys
import time

from dsgraph.agp.fits import attention_seconds, rest_seconds
from dsgraph.ops import backend_names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dsgraph profile",
        description="Measure fused attention time per edge-head and the rest of a layer per node (alpha), and "
        "all-gather, reduce-scatter, all-to-all and uneven all-to-all time per byte (beta) on 1..MAX_RANKS local "
        "ranks; fit them (attention: a log-log line of edge-heads; the rest of a layer: per node-MAC, per "
        "node-value and per layer; collectives: latency plus bandwidth) and write a profile JSON for `dsgraph plan` "
        'and "strategy": "auto". '
        "The CPU backends run gloo ranks on this machine's cores; --backend cuda runs one rank per GPU on NCCL "
        "and times with CUDA events. On fewer GPUs than MAX_RANKS, --collectives-from supplies the collective "
        "fits of the rank counts that cannot be measured here.",
    )
    p.add_argument("--out", default="agp_profile.json", help="profile JSON to write (default: agp_profile.json)")
    p.add_argument(
        "--max-ranks",
        type=int,
        default=None,
        help="rank counts 1..MAX_RANKS (default: 4 on the CPU; on cuda the GPUs present, or all the rank "
        "counts of --collectives-from)",
    )
    p.add_argument("--heads", type=int, default=8, help="attention heads H of the measured layer (default 8)")
    p.add_argument("--head-dim", type=int, default=16, help="head dimension D (default 16)")
    p.add_argument("--ffn-mult", type=int, default=2, help="FFN width multiple (default 2)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument(
        "--backend",
        choices=["auto", *backend_names()],
        default="auto",
        help="attention backend (default: auto, the CPU's fused kernel); cuda profiles the GPUs",
    )
    p.add_argument(
        "--collectives-from",
        dest="collectives_from",
        metavar="PROFILE",
        help="AGP profile whose collective fits are used for the rank counts above those measured here "
        "(on one GPU: every p > 1), for example docs/agp/dgx_h100_8gpu_bf16_profile.json; the output's "
        "system section names it",
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        help="largest collective message in bytes (default: 4 MiB on the CPU, 64 MiB on GPUs, or what memory allows)",
    )
    p.add_argument(
        "--reps", type=int, default=3, help="round-robin repetitions per measurement; the minimum is kept (default 3)"
    )
    p.add_argument("--threads", type=int, default=1, help="torch and numba threads per rank (default 1)")
    return p


REST_REFERENCE = (2**16, 128)
"""(nodes, hidden) of the block whose rest time the fit table shows."""
ATTENTION_REFERENCE = (2**20, 16)
"""(edge-heads, in-degree) of the kernel call whose attention time the fit table shows."""


def format_fits(profile) -> str:
    """The fit table: one line per (p, quantity) with R^2, time at a reference size and the fitted
    model (a power of x, or latency plus bandwidth for the collectives)."""
    lines = [f"{'p':>2}  {'quantity':<18} {'R^2':>6}  {'time at reference size':<28} model"]
    n, d = REST_REFERENCE
    block = (n * d * d * (4 + 2 * profile.ffn_mult), n * d, 1.0)  # one block's node-MACs, node-values, layers
    edge_heads, degree = ATTENTION_REFERENCE
    call = (edge_heads / profile.heads, edge_heads, edge_heads / degree)  # edges, edge-heads, row-heads
    for p, fits in sorted(profile.ranks.items()):
        rows = [
            ("attention", fits.attention, attention_seconds(fits.attention, *call), f"2^20 edge-heads, deg {degree}"),
            ("rest", fits.rest, rest_seconds(fits.rest, *block), f"{n // 1024}k x d {d} block"),
        ]
        rows += [(name, fit, fit(2**20), "1 MiB") for name, fit in fits.collectives.items()]
        for name, fit, seconds, unit in rows:
            at = f"{seconds * 1e3:9.3f} ms at {unit}"
            lines.append(f"{p:>2}  {name:<18} {fit.r2:6.3f}  {at:<28} {fit.describe()}")
        if fits.copy is not None:
            at = f"{fits.copy(2**20) * 1e3:9.3f} ms at 2^20 values"
            lines.append(f"{p:>2}  {'copy':<18} {fits.copy.r2:6.3f}  {at:<28} {fits.copy.describe('value')}")
    knees = ", ".join(f"p={p}: {fits.head_dim_knee:.1f}" for p, fits in sorted(profile.ranks.items()))
    lines.append(f"head_dim_knee (an (edge, head) costs in proportion to knee + D): {knees}")
    source = profile.system.get("collectives_source")
    if source:
        lines.append(
            f"measured here: p = {profile.system.get('ranks_measured')}; {source['note']} "
            f"({source['description'] or 'no description'})"
        )
    return "\n".join(lines)


def resolve_max_ranks(args, collectives) -> int:
    """--max-ranks, or its default: 4 on the CPU; on cuda every rank count of --collectives-from,
    else one per GPU present (at least 1)."""
    if args.max_ranks is not None:
        return args.max_ranks
    if args.backend != "cuda":
        return 4
    if collectives is not None:
        return collectives.max_ranks
    import torch

    return max(1, torch.cuda.device_count() if torch.cuda.is_available() else 0)


def run(args):
    """Measures (and merges) the profile that ``args`` asks for; ValueError/FileNotFoundError on bad input."""
    from dsgraph.agp.measure import measurable_ranks, measure_profile
    from dsgraph.agp.profile import load_profile, with_collectives_from

    collectives = load_profile(args.collectives_from) if args.collectives_from else None
    max_ranks = resolve_max_ranks(args, collectives)
    here = measurable_ranks(args.backend, max_ranks, args.head_dim)
    if here < max_ranks and collectives is None:
        raise ValueError(
            f"--max-ranks {max_ranks} needs {max_ranks} GPUs for the NCCL collectives, but this machine has {here}; "
            "pass --collectives-from PROFILE.json (for example docs/agp/dgx_h100_8gpu_bf16_profile.json) for the "
            f"rank counts above {here}, or lower --max-ranks"
        )
    profile = measure_profile(
        max_ranks=here,
        heads=args.heads,
        head_dim=args.head_dim,
        ffn_mult=args.ffn_mult,
        dtype=args.dtype,
        backend=args.backend,
        max_bytes=args.max_bytes,
        reps=args.reps,
        threads=args.threads,
    )
    if collectives is not None:
        profile = with_collectives_from(profile, collectives, max_ranks)
    return profile


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    began = time.perf_counter()
    try:
        profile = run(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph profile: error: {err}", file=sys.stderr)
        return 2
    profile.save(args.out)
    print(format_fits(profile))
    print(
        f"wrote {args.out} ({profile.backend}, {profile.dtype}, p = 1..{profile.max_ranks}) in "
        f"{time.perf_counter() - began:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
