"""Validation sweep of the AGP model: measured against predicted time and peak memory of one
Transformer layer (forward plus backward) for every graph configuration, strategy (ag, a2a, halo)
and rank count (1, 2, 4).

    python -m tools.reports.validate_agp --profile docs/agp/cpu_profile.json --out-dir docs/agp/scale
    python -m tools.reports.validate_agp --out-dir docs/agp/scale --reuse   # resume, or re-evaluate

The ``scale`` grid (default): R-MAT graphs rmat:16 with edge factors 8 and 16 and rmat:18 with 8
(65k-262k nodes, 0.56M-2.3M edges), and (d, H) in (64, 4), (128, 8), (96, 6) (H = 6: GP-A2A is
infeasible on 4 ranks): 9 configurations, about 40 minutes for 3 runs on 2 cores (one run per
``--budget-min 12`` command). ``--grid small`` is the 2026-11-29 grid of 512- and 2,048-node graphs
(history).
GP-AG and GP-A2A use their default row splits; GP-Halo a METIS partition, as training does.

The sweep runs ``--runs`` independent runs, round robin: run 1 at p = 1, 2, 4, then run 2, ...
Within a run each (strategy, p) is warmed up, timed ``--reps`` times (the fastest kept: the ranks keep
freed memory in the heap, which takes a few calls to reach its high-water mark, and until then a call
pays the kernel's first touch of fresh pages), then run once for its peak memory
(``agp_sweep_ranks.py``).
Each (run, p) spawns the gloo ranks once and measures every configuration inside
(``agp_sweep_ranks.py``), and is saved to sweep_raw.json as soon as it ends; ``--budget-min``
stops starting new ones after that many minutes, and ``--reuse`` resumes where the file ends (or
re-evaluates it against another profile). The medians over runs are judged by
``agp_sweep_eval.py``: selection accuracy over all configurations and over those where the best and
second-best pairs differ by more than the noise of the runs, the repeatability oracle, and the
median time and memory errors. Writes sweep.json, sweep.md and plots (predicted_vs_measured.png,
memory_predicted_vs_measured.png, strategy_map.png).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass

from dsgraph.agp.model import GraphShape, ModelShape, predict, strategy_names
from dsgraph.agp.profile import load_profile
from dsgraph.agp.spawn import run_ranks
from tools.reports import agp_sweep_eval as ev
from tools.reports.agp_sweep_ranks import graph_of, rank_sweep

RANKS = (1, 2, 4)
RAW_FORMAT, RAW_VERSION = "dsgraph-agp-sweep", 3  # 3: timed on a warm heap, memory sampled apart


@dataclass(frozen=True)
class Config:
    scale: int
    edge_factor: int
    hidden: int
    heads: int

    @property
    def name(self) -> str:
        return f"rmat{self.scale}x{self.edge_factor} d{self.hidden} H{self.heads}"


GRIDS = ("scale", "small", "quick")


def configs(grid: str) -> list[Config]:
    """The configurations of a grid, grouped by graph (each rank loads a graph once)."""
    if grid == "quick":  # a smoke test of the tool
        return [Config(8, 8, 64, 4), Config(9, 16, 96, 6)]
    if grid == "small":  # the 2026-11-29 grid
        sizes, widths = [(9, 4), (9, 16), (9, 32), (11, 4), (11, 16), (11, 32)], [(64, 4), (128, 8), (96, 6), (256, 8)]
    elif grid == "scale":
        sizes, widths = [(16, 8), (16, 16), (18, 8)], [(64, 4), (128, 8), (96, 6)]
    else:
        raise ValueError(f"--grid must be one of {', '.join(GRIDS)}, got '{grid}'")
    return [Config(s, ef, d, h) for s, ef in sizes for d, h in widths]


def units(runs: int) -> list[tuple[int, int]]:
    """(run, p) in the order they are measured: round robin over p within each run."""
    return [(r, p) for r in range(runs) for p in RANKS]


def save_raw(path: str, grid: str, cfgs, runs: int, measured: dict, wall_s: float) -> None:
    """measured: (run, p, i, strategy) -> (seconds, peak rise bytes, baseline bytes)."""
    rows = [[r, p, i, s, *v] for (r, p, i, s), v in sorted(measured.items())]
    doc = {"format": RAW_FORMAT, "version": RAW_VERSION, "grid": grid, "runs": runs}
    doc.update(configs=[asdict(c) for c in cfgs], wall_s=wall_s, measured=rows)
    with open(path, "w") as f:
        json.dump(doc, f)


def load_raw(path: str, grid: str, cfgs, runs: int) -> tuple[dict, float]:
    """(measurements, seconds they took) from an earlier run of the same grid; empty when there is none."""
    if not os.path.exists(path):
        return {}, 0.0
    with open(path) as f:
        data = json.load(f)
    if data.get("format") != RAW_FORMAT or data.get("version") != RAW_VERSION:
        raise ValueError(
            f"{path}: not a version-{RAW_VERSION} {RAW_FORMAT} file (an older sweep); use another --out-dir"
        )
    if data.get("configs") != [asdict(c) for c in cfgs] or data.get("runs") != runs:
        raise ValueError(
            f"{path}: measured for grid '{data.get('grid')}' with {data.get('runs')} runs, not '{grid}' with {runs}; "
            "use another --out-dir or drop --reuse"
        )
    measured = {(r, p, i, s): tuple(v) for r, p, i, s, *v in data["measured"]}
    return measured, float(data.get("wall_s", 0.0))


def measure(args, cfgs, threads: int, raw_path: str) -> tuple[dict, float, bool]:
    """Measures the (run, p) units not yet in ``raw_path`` (with --reuse), saving after each, until
    ``--budget-min`` runs out. Returns (measurements, seconds spent, whether every unit is there)."""
    measured, spent_s = load_raw(raw_path, args.grid, cfgs, args.runs) if args.reuse else ({}, 0.0)
    began = time.perf_counter()
    as_dicts = [asdict(c) for c in cfgs]
    for r, p in units(args.runs):
        if any(k[0] == r and k[1] == p for k in measured):
            continue
        if args.budget_min and time.perf_counter() - began > 60 * args.budget_min:
            print(f"budget of {args.budget_min} min spent: run again with --reuse to continue", flush=True)
            return measured, spent_s, False
        print(f"run {r + 1}/{args.runs}, p = {p}: {len(cfgs)} configurations", flush=True)
        started = time.perf_counter()
        out = run_ranks(rank_sweep, p, as_dicts, args.reps, args.backend, f"run {r + 1} ", threads=threads)
        for (i, s), v in out.items():
            measured[(r, p, i, s)] = tuple(v)
        spent_s += time.perf_counter() - started
        save_raw(raw_path, args.grid, cfgs, args.runs, measured, spent_s)
    return measured, spent_s, True


def shapes(cfgs) -> dict:
    """GraphShape per graph: the default row splits and the METIS partitions training uses."""
    out = {}
    for c in cfgs:
        key = (c.scale, c.edge_factor)
        if key not in out:
            out[key] = GraphShape.from_graph(graph_of(*key), RANKS)
    return out


def evaluate(cfgs, measured: dict, profile, runs: int) -> tuple[list[dict], dict]:
    """Per-configuration rows and the summary (``agp_sweep_eval``)."""
    first, graph_shapes = strategy_names()[0], shapes(cfgs)
    rows, judged, oracle, time_err, mem_err = [], [], [], [], []
    for i, cfg in enumerate(cfgs):
        shape = graph_shapes[(cfg.scale, cfg.edge_factor)]
        model = ModelShape(layers=1, hidden=cfg.hidden, heads=cfg.heads, ffn_mult=2)
        pairs = {}
        for p in RANKS:
            for s in strategy_names():
                got = [measured.get((r, p, i, ev.measured_as(s, p, first)[0])) for r in range(runs)]
                if any(g is None for g in got):
                    continue
                pred = predict(s, p, shape, model, profile, step=False)
                if not pred.feasible:
                    continue
                pairs[(s, p)] = {
                    "predicted_s": pred.time_s,
                    "predicted_transient_bytes": ev.transient_bytes(pred),
                    "times": [g[0] for g in got],
                    "peaks": [g[1] for g in got],
                    "baseline_bytes": max(g[2] for g in got),
                }
        if not pairs:
            continue
        j = ev.judge(pairs, first)
        judged.append(j)
        oracle += ev.oracle_hits(pairs, first, runs)
        t_err, m_err = ev.errors(pairs, first)
        time_err += t_err
        mem_err += m_err
        rows.append(
            {
                "config": cfg.name,
                **asdict(cfg),
                "nodes": shape.num_nodes,
                "edges": shape.num_edges,
                "pick": "{}@{}".format(*j["pick"]),
                "best": "{}@{}".format(*j["best"]),
                "second": "{}@{}".format(*j["second"]) if j["second"] else None,
                "pick_over_best": j["pick_over_best"],
                "pick_within_10pct": j["hit"],
                "gap_pct": 100.0 * j["gap"],
                "noise_pct": 100.0 * j["noise"],
                "distinguishable": j["distinguishable"],
                "pairs": {
                    f"{s}@{p}": {
                        **v,
                        "measured_s": statistics.median(v["times"]),
                        "peak_bytes": statistics.median(v["peaks"]),
                    }
                    for (s, p), v in sorted(pairs.items(), key=lambda kv: (kv[0][1], kv[0][0]))
                },
            }
        )
    return rows, ev.summarise(judged, oracle, time_err, mem_err)


def markdown(rows, summary) -> str:
    s = summary
    lines = [
        f"Selection accuracy (pick within {ev.WITHIN:.0%} of the measured best over (strategy, p in 1, 2, 4), "
        f"medians of {s['runs']} runs): **{s['selection_accuracy_pct']:.1f}%** of {s['configurations']} "
        "configurations; "
        f"**{s['selection_accuracy_distinguishable_pct']:.1f}%** of the {s['distinguishable_configurations']} where "
        "the best and second-best differ by more than their runs' spread.",
        f"Repeatability oracle (one run's measured best, judged by another run's times): "
        f"**{s['oracle_selection_accuracy_pct']:.1f}%** of {s['oracle_comparisons']} comparisons; median noise "
        f"(spread of the runs of the best two pairs) {s['median_noise_pct']:.1f}%.",
        f"Median absolute prediction error over {s['measured_pairs']} measured pairs: time "
        f"**{s['median_abs_time_error_pct']:.1f}%** (90th percentile {s['p90_abs_time_error_pct']:.1f}%), "
        f"peak memory **{s['median_abs_memory_error_pct']:.1f}%** "
        f"(90th percentile {s['p90_abs_memory_error_pct']:.1f}%).",
        "",
        "| configuration | N | E | pick | best | pick / best | gap to 2nd | noise | best ms meas/pred "
        "| best MiB meas/pred |",
        "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        best = r["pairs"][r["best"]]
        lines.append(
            f"| {r['config']} | {r['nodes']:,} | {r['edges']:,} | {r['pick']} | {r['best']} "
            f"| {r['pick_over_best']:.2f} | {r['gap_pct']:.1f}% | {r['noise_pct']:.1f}%"
            f"{'' if r['distinguishable'] else ' (close)'} "
            f"| {best['measured_s'] * 1e3:.0f} / {best['predicted_s'] * 1e3:.0f} "
            f"| {best['peak_bytes'] / 2**20:.0f} / {best['predicted_transient_bytes'] / 2**20:.0f} |"
        )
    return "\n".join(lines) + "\n"


def _scatter(rows, out_path: str, measured_key: str, predicted_key: str, unit: float, label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = dict(zip(strategy_names(), ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")))
    markers = {1: "o", 2: "s", 4: "^"}
    fig, ax = plt.subplots(figsize=(6, 5.5))
    lo, hi = float("inf"), 0.0
    for r in rows:
        for key, v in r["pairs"].items():
            s, p = key.split("@")
            if int(p) == 1 and s != strategy_names()[0]:
                continue
            x, y = v[measured_key] / unit, v[predicted_key] / unit
            ax.scatter(x, y, c=colours[s], marker=markers[int(p)], s=18, alpha=0.8)
            lo, hi = min(lo, x, y), max(hi, x, y)
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.plot([lo, hi], [lo * 1.15, hi * 1.15], "k:", lw=0.6)
    ax.plot([lo, hi], [lo / 1.15, hi / 1.15], "k:", lw=0.6)
    ax.set_xscale("log"), ax.set_yscale("log")
    ax.set_xlabel(f"measured {label}"), ax.set_ylabel(f"predicted {label}")
    for s, c in colours.items():
        ax.scatter([], [], c=c, label=s)
    for p, m in markers.items():
        ax.scatter([], [], c="grey", marker=m, label=f"p={p}")
    ax.legend(fontsize=8), ax.set_title("AGP: predicted vs measured (dotted: ±15%)")
    fig.tight_layout(), fig.savefig(out_path, dpi=120), plt.close(fig)


def plots(rows, out_dir: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _scatter(
        rows,
        os.path.join(out_dir, "predicted_vs_measured.png"),
        "measured_s",
        "predicted_s",
        1e-3,
        "ms (one layer, fwd+bwd, median of runs)",
    )
    _scatter(
        rows,
        os.path.join(out_dir, "memory_predicted_vs_measured.png"),
        "peak_bytes",
        "predicted_transient_bytes",
        2**20,
        "MiB (peak above resident, busiest rank)",
    )
    colours = dict(zip(strategy_names(), ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")))
    markers = {1: "o", 2: "s", 4: "^"}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = [r["config"] for r in rows]
    for x, r in enumerate(rows):
        for which, size, face in (("best", 160, True), ("pick", 50, False)):
            s, p = r[which].split("@")
            kw = (
                {"facecolors": colours[s], "edgecolors": "none", "alpha": 0.6}
                if face
                else {"facecolors": "none", "edgecolors": colours[s], "linewidths": 2}
            )
            ax.scatter(x, int(p), s=size, marker=markers[int(p)], **kw)
    ax.set_xticks(range(len(names)), names, rotation=75, fontsize=7)
    ax.set_yticks(list(markers)), ax.set_ylabel("ranks p")
    for s, c in colours.items():
        ax.scatter([], [], c=c, label=f"{s} (filled: measured best, ring: pick)")
    ax.legend(fontsize=8, loc="upper left"), ax.set_title("Measured best and predicted pick per configuration")
    fig.tight_layout(), fig.savefig(os.path.join(out_dir, "strategy_map.png"), dpi=120), plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--profile", default="docs/agp/cpu_profile.json", help="AGP profile of this machine (dsgraph profile)"
    )
    ap.add_argument(
        "--out-dir", default="docs/agp/scale", help="where sweep_raw.json, sweep.json, sweep.md and the plots go"
    )
    ap.add_argument(
        "--grid",
        default="scale",
        choices=GRIDS,
        help="configurations (scale: rmat:16-18; small: the 2026-11-29 grid; quick: a smoke test)",
    )
    ap.add_argument("--runs", type=int, default=3, help="independent runs, round robin over p; medians compared (>= 2)")
    ap.add_argument(
        "--reps",
        type=int,
        default=3,
        help="timed samples per pair within one run, after a warm-up, the pairs interleaved (fastest kept: the "
        "heap's steady state)",
    )
    ap.add_argument(
        "--budget-min",
        type=float,
        default=0.0,
        help="start no new (run, p) after this many minutes (0: no limit); resume with --reuse",
    )
    ap.add_argument("--backend", default="cpu", help="attention backend (must match the profile)")
    ap.add_argument("--threads", type=int, help="threads per rank (default: the profile's)")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="keep the measurements in OUT_DIR/sweep_raw.json: resume the sweep, or re-evaluate it against "
        "another profile",
    )
    args = ap.parse_args(argv)
    if args.runs < 2:
        ap.error(f"--runs must be at least 2 (the noise and the oracle compare runs), got {args.runs}")
    if args.reps < 1:
        ap.error(f"--reps must be at least 1, got {args.reps}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        profile = load_profile(args.profile)
        profile.check_matches(backend=args.backend, dtype="float32")
        if profile.max_ranks < max(RANKS):
            raise ValueError(
                f"{args.profile}: the sweep needs rank counts up to {max(RANKS)}; the profile covers "
                f"{profile.max_ranks}"
            )
        cfgs = configs(args.grid)
        os.makedirs(args.out_dir, exist_ok=True)
        raw_path = os.path.join(args.out_dir, "sweep_raw.json")
        threads = args.threads or int(profile.system.get("threads_per_rank", 1))
        measured, spent_s, complete = measure(args, cfgs, threads, raw_path)
    except (ValueError, FileNotFoundError) as err:
        print(f"validate_agp: error: {err}", file=sys.stderr)
        return 2
    if not complete:
        return 0
    rows, summary = evaluate(cfgs, measured, profile, args.runs)
    summary.update(runs=args.runs, reps=args.reps, grid=args.grid, measurement_wall_s=spent_s, profile=args.profile)
    with open(os.path.join(args.out_dir, "sweep.json"), "w") as f:
        json.dump({"summary": summary, "rows": rows}, f, indent=1)
    text = markdown(rows, summary)
    with open(os.path.join(args.out_dir, "sweep.md"), "w") as f:
        f.write(text)
    plots(rows, args.out_dir)
    print(text)
    print(f"sweep done ({spent_s:.0f} s of measurements); wrote {args.out_dir}/sweep.json, sweep.md and the plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
