"""Validation sweep of the AGP model: measured vs predicted time of one Transformer layer (forward
plus backward) for every graph configuration, strategy (ag, a2a, halo) and rank count (1, 2, 4).

    python -m tools.reports.validate_agp --profile docs/agp/cpu_profile.json --out-dir docs/agp

Graphs are R-MAT graphs (power-law, planted communities, randomly permuted ids) of different N and
E/N; the layer has different d and H. GP-AG and GP-A2A use the even contiguous row split; GP-Halo
uses a METIS partition (relabelled). Per rank count the tool spawns the gloo ranks once and loops over
the configurations inside; every time is the minimum over round-robin repetitions of the slowest rank.

Reports, per configuration, whether the automatic pick (the fastest predicted feasible (strategy,
p)) is within 10% of the measured best, and the prediction error of every measured pair; writes
sweep.json, sweep.md, sweep_raw.json (the measurements; ``--reuse`` re-evaluates them against another
profile or resumes an interrupted sweep) and two plots (predicted_vs_measured.png, strategy_map.png).
``--compare`` takes another run's sweep_raw.json and reports how well the two runs' times agree: the
noise floor below which no model's selection accuracy can be judged.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import torch

from dsgraph.agp.measure import interleaved_min
from dsgraph.agp.model import GraphShape, ModelShape, SplitShape, predict, strategy_names
from dsgraph.agp.profile import load_profile
from dsgraph.agp.spawn import run_ranks

RANKS = (1, 2, 4)
WITHIN = 0.10


@dataclass(frozen=True)
class Config:
    scale: int
    edge_factor: int
    hidden: int
    heads: int

    @property
    def name(self) -> str:
        return f"rmat{self.scale}x{self.edge_factor} d{self.hidden} H{self.heads}"


def configs(quick: bool) -> list[Config]:
    """24 configurations: N in {2^9, 2^11}, E/N about {4, 16, 32}, (d, H) in 4 pairs (one with H=6,
    so GP-A2A is infeasible on 4 ranks). Small, so the whole sweep fits in ~15 minutes on 2 shared cores."""
    if quick:
        return [Config(8, 8, 64, 4), Config(9, 16, 128, 8)]
    sizes = [(9, 4), (9, 16), (9, 32), (11, 4), (11, 16), (11, 32)]
    widths = [(64, 4), (128, 8), (96, 6), (256, 8)]
    return [Config(s, ef, d, h) for s, ef in sizes for d, h in widths]


def _graph(cfg: Config):
    from dsgraph.graph import load_dataset

    return load_dataset(f"rmat:{cfg.scale}:{cfg.edge_factor}", seed=0).with_self_loops()


def _halo_split(graph, p: int):
    """METIS parts relabelled to contiguous ranges: (graph, counts)."""
    from dsgraph.graph.partition import partition_nodes, relabel

    parts = partition_nodes(graph, p, "metis", seed=0)
    relabelled, _, ranges = relabel(graph, parts, p)
    return relabelled, [int(e - s) for s, e in ranges]


def _rank_sweep(rank, p, cfgs, reps, backend):
    import warnings

    from dsgraph.comm import GraphParallelGroup
    from dsgraph.models.graph_transformer import TransformerBlock
    from dsgraph.modes.ranks import rank_attention
    from dsgraph.parallel import StrategyContext, get_strategy
    from dsgraph.train.trainer import init_distributed

    warnings.filterwarnings("ignore")
    init_distributed(mpi_discovery=False)

    results = {}
    for i, cfg in enumerate(cfgs):
        graph = _graph(cfg)
        cases = []
        for name in strategy_names() if p > 1 else strategy_names()[:1]:
            if get_strategy(name).infeasible(cfg.heads, p):
                continue
            ctx = StrategyContext(heads=cfg.heads, backend=backend)
            pg, rank_graph, attention = rank_attention(graph, GraphParallelGroup.from_world(), name, ctx)
            torch.manual_seed(0)
            block = TransformerBlock(cfg.hidden, cfg.heads, 2, dropout=0.1)
            h = torch.randn(rank_graph.nodes.num_rows, cfg.hidden, requires_grad=True)
            ids = rank_graph.nodes.node_ids

            def run(block=block, attention=attention, h=h, ids=ids):
                block(h, attention, ids, 0, 1, 1).sum().backward()

            cases.append((name, 0.0, run))
        for name, points in interleaved_min(cases, reps).items():
            results[(i, name)] = points[0][1]
        if rank == 0:
            print(
                f"  p={p} [{i + 1}/{len(cfgs)}] {cfg.name}: "
                + ", ".join(f"{n} {results[(i, n)] * 1e3:.1f} ms" for n, *_ in cases),
                flush=True,
            )
    return results


def _shape(cfg: Config) -> GraphShape:
    from dsgraph.graph.partition import partition_quality

    graph = _graph(cfg)
    shape = GraphShape.from_graph(graph, RANKS, partition_method=None)
    shape.partitions[1] = SplitShape([graph.num_nodes], [graph.num_edges], [0], [0])
    for p in RANKS[1:]:
        relabelled, counts = _halo_split(graph, p)
        starts = [0]
        for c in counts:
            starts.append(starts[-1] + c)
        q = partition_quality(relabelled, [[starts[r], starts[r + 1]] for r in range(p)])
        shape.partitions[p] = SplitShape.from_quality(q)
    return shape


def _save_raw(path: str, cfgs, measured, wall_s: float) -> None:
    with open(path, "w") as f:
        json.dump(
            {
                "configs": [asdict(c) for c in cfgs],
                "wall_s": wall_s,
                "measured": [[p, i, s, t] for (p, i, s), t in sorted(measured.items())],
            },
            f,
        )


def _load_raw(path: str, cfgs) -> tuple[dict, float]:
    """(measurements, seconds they took) from an earlier run; empty when there is none."""
    if not os.path.exists(path):
        return {}, 0.0
    with open(path) as f:
        data = json.load(f)
    if data.get("configs") != [asdict(c) for c in cfgs]:
        raise ValueError(f"{path}: measured for other configurations; delete it or drop --reuse")
    return {(p, i, s): t for p, i, s, t in data["measured"]}, float(data.get("wall_s", 0.0))


def evaluate(cfgs, measured, profile) -> tuple[list[dict], dict]:
    """Per-configuration rows and the summary (selection accuracy, prediction errors)."""
    rows, errors, hits, hits_at = [], [], 0, {p: [0, 0] for p in RANKS[1:]}
    for i, cfg in enumerate(cfgs):
        shape = _shape(cfg)
        model = ModelShape(layers=1, hidden=cfg.hidden, heads=cfg.heads, ffn_mult=2)
        pairs = {}
        for p in RANKS:
            for s in strategy_names():
                t = measured.get((p, i, s if p > 1 else strategy_names()[0]))
                if t is None:
                    continue
                pred = predict(s, p, shape, model, profile, step=False)
                if not pred.feasible:
                    continue
                pairs[(s, p)] = (pred.time_s, t)
                if p > 1 or s == strategy_names()[0]:
                    errors.append(abs(pred.time_s - t) / t)
        pick = min(pairs, key=lambda k: pairs[k][0])
        best = min(pairs, key=lambda k: pairs[k][1])
        ok = pairs[pick][1] <= (1 + WITHIN) * pairs[best][1]
        hits += ok
        for p in RANKS[1:]:
            at = {k: v for k, v in pairs.items() if k[1] == p}
            if at:
                pk, bk = min(at, key=lambda k: at[k][0]), min(at, key=lambda k: at[k][1])
                hits_at[p][0] += at[pk][1] <= (1 + WITHIN) * at[bk][1]
                hits_at[p][1] += 1
        rows.append(
            {
                "config": cfg.name,
                **asdict(cfg),
                "nodes": shape.num_nodes,
                "edges": shape.num_edges,
                "pick": f"{pick[0]}@{pick[1]}",
                "best": f"{best[0]}@{best[1]}",
                "pick_within_10pct": ok,
                "pick_over_best": pairs[pick][1] / pairs[best][1],
                "pairs": {
                    f"{s}@{p}": {"predicted_s": a, "measured_s": b}
                    for (s, p), (a, b) in sorted(pairs.items(), key=lambda kv: (kv[0][1], kv[0][0]))
                },
            }
        )
    summary = {
        "configurations": len(cfgs),
        "measured_pairs": len(errors),
        "selection_accuracy_pct": 100.0 * hits / len(cfgs),
        "selection_accuracy_at_p_pct": {str(p): 100.0 * h / n for p, (h, n) in hits_at.items() if n},
        "median_abs_prediction_error_pct": 100.0 * statistics.median(errors),
        "mean_abs_prediction_error_pct": 100.0 * statistics.fmean(errors),
    }
    return rows, summary


def repeatability(cfgs, first: dict, second: dict) -> dict:
    """How far two measurements of the same sweep agree: the median relative difference of a pair's
    two times, and how often the best pair of one measurement is within 10% of the best of the other
    (the selection accuracy of an oracle that knows one run's times exactly)."""
    diffs = [abs(first[k] - second[k]) / second[k] for k in first if k in second]
    hits = []
    for a, b in ((first, second), (second, first)):
        for i in range(len(cfgs)):
            at_a = {k: t for k, t in a.items() if k[1] == i and k in b}
            at_b = {k: b[k] for k in at_a}
            hits.append(at_b[min(at_a, key=at_a.get)] <= (1 + WITHIN) * min(at_b.values()))
    return {
        "median_abs_difference_pct": 100.0 * statistics.median(diffs),
        "p90_abs_difference_pct": 100.0 * sorted(diffs)[int(0.9 * (len(diffs) - 1))],
        "oracle_selection_accuracy_pct": 100.0 * sum(hits) / len(hits),
    }


def markdown(rows, summary) -> str:
    lines = [
        f"Selection accuracy (pick within {WITHIN:.0%} of the measured best over (strategy, p in 1, 2, 4)): "
        f"**{summary['selection_accuracy_pct']:.1f}%** of {summary['configurations']} configurations; at a fixed world "
        "size: " + ", ".join(f"p={p}: {v:.1f}%" for p, v in summary["selection_accuracy_at_p_pct"].items()),
        f"Median absolute prediction error: **{summary['median_abs_prediction_error_pct']:.1f}%** "
        f"(mean {summary['mean_abs_prediction_error_pct']:.1f}%) over {summary['measured_pairs']} measured (strategy, "
        "p) pairs.",
    ]
    if "repeatability" in summary:
        r = summary["repeatability"]
        lines.append(
            f"Repeatability against {r['against']}: the same pair measured twice differs by "
            f"{r['median_abs_difference_pct']:.1f}% "
            f"(median; 90th percentile {r['p90_abs_difference_pct']:.1f}%); an oracle that picks one run's measured "
            "best is "
            f"within 10% of the other run's best in **{r['oracle_selection_accuracy_pct']:.1f}%** of cases."
        )
    lines += [
        "",
        "| configuration | N | E | pick | measured best | pick / best | ag@1 ms meas/pred | best ms meas/pred |",
        "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        one, best = r["pairs"]["ag@1"], r["pairs"][r["best"]]
        lines.append(
            f"| {r['config']} | {r['nodes']:,} | {r['edges']:,} | {r['pick']} | {r['best']} "
            f"| {r['pick_over_best']:.2f} | "
            f"{one['measured_s'] * 1e3:.1f} / {one['predicted_s'] * 1e3:.1f} "
            f"| {r['pairs'][r['best']]['measured_s'] * 1e3:.1f} / {best['predicted_s'] * 1e3:.1f} |"
        )
    return "\n".join(lines) + "\n"


def plots(rows, out_dir: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = dict(zip(strategy_names(), ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")))
    markers = {1: "o", 2: "s", 4: "^"}
    fig, ax = plt.subplots(figsize=(6, 5.5))
    lo, hi = float("inf"), 0.0
    for r in rows:
        for key, v in r["pairs"].items():
            s, p = key.split("@")
            ax.scatter(
                v["measured_s"] * 1e3, v["predicted_s"] * 1e3, c=colours[s], marker=markers[int(p)], s=18, alpha=0.8
            )
            lo, hi = (
                min(lo, v["measured_s"] * 1e3, v["predicted_s"] * 1e3),
                max(hi, v["measured_s"] * 1e3, v["predicted_s"] * 1e3),
            )
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.plot([lo, hi], [lo * 1.25, hi * 1.25], "k:", lw=0.6)
    ax.plot([lo, hi], [lo / 1.25, hi / 1.25], "k:", lw=0.6)
    ax.set_xscale("log"), ax.set_yscale("log")
    ax.set_xlabel("measured ms (one layer, fwd+bwd)"), ax.set_ylabel("predicted ms")
    for s, c in colours.items():
        ax.scatter([], [], c=c, label=s)
    for p, m in markers.items():
        ax.scatter([], [], c="grey", marker=m, label=f"p={p}")
    ax.legend(fontsize=8), ax.set_title("AGP: predicted vs measured (dotted: ±25%)")
    fig.tight_layout(), fig.savefig(os.path.join(out_dir, "predicted_vs_measured.png"), dpi=120), plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, p in zip(axes, (2, 4)):
        for r in rows:
            at = {k: v for k, v in r["pairs"].items() if k.endswith(f"@{p}")}
            if not at:
                continue
            meas = min(at, key=lambda k: at[k]["measured_s"]).split("@")[0]
            pred = min(at, key=lambda k: at[k]["predicted_s"]).split("@")[0]
            x = r["edges"] / r["nodes"] * (1.06 if r["scale"] == 11 else 0.94)
            ax.scatter(x, r["hidden"], s=160, facecolors=colours[meas], edgecolors="none", alpha=0.7)
            ax.scatter(x, r["hidden"], s=40, facecolors="none", edgecolors=colours[pred], linewidths=2)
        ax.set_xscale("log"), ax.set_xlabel("E/N (left: N=2^9, right: N=2^11)"), ax.set_title(f"p = {p}")
    axes[0].set_ylabel("hidden d")
    for s, c in colours.items():
        axes[1].scatter([], [], c=c, label=f"{s} (filled: measured winner, ring: predicted)")
    fig.legend(*axes[1].get_legend_handles_labels(), fontsize=8, loc="lower center", ncol=3)
    fig.suptitle("Strategy map: fastest strategy over E/N and d")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(os.path.join(out_dir, "strategy_map.png"), dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--profile", default="docs/agp/cpu_profile.json", help="AGP profile of this machine (dsgraph profile)"
    )
    ap.add_argument("--out-dir", default="docs/agp", help="where sweep.json, sweep.md and the plots go")
    ap.add_argument("--reps", type=int, default=7, help="round-robin repetitions per measurement (minimum kept)")
    ap.add_argument("--backend", default="cpu", help="attention backend (must match the profile)")
    ap.add_argument("--quick", action="store_true", help="two tiny configurations (a smoke test of the tool)")
    ap.add_argument("--threads", type=int, help="threads per rank (default: the profile's)")
    ap.add_argument(
        "--compare",
        metavar="RAW_JSON",
        help="another run's sweep_raw.json: report how well the two "
        "measurements agree (the noise floor of the selection accuracy)",
    )
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="reuse the measurements in OUT_DIR/sweep_raw.json (re-evaluate "
        "against another profile, or resume an interrupted sweep)",
    )
    return ap.parse_args(argv)


def _measure(args, cfgs: list[Config], profile, raw_path: str) -> tuple[dict, float]:
    """The measured time of every (p, configuration, strategy), rank count by rank count, saved to
    ``raw_path`` after each (with --reuse, the ones saved there are kept); (times, seconds spent)."""
    threads = args.threads or int(profile.system.get("threads_per_rank", 1))
    measured, spent_s = _load_raw(raw_path, cfgs) if args.reuse else ({}, 0.0)
    for p in RANKS:
        if any(key[0] == p for key in measured):
            print(f"p = {p}: reusing {raw_path}", flush=True)
            continue
        print(f"p = {p}: {len(cfgs)} configurations", flush=True)
        started = time.perf_counter()
        for (i, s), t in run_ranks(_rank_sweep, p, cfgs, args.reps, args.backend, threads=threads).items():
            measured[(p, i, s)] = t
        spent_s += time.perf_counter() - started
        _save_raw(raw_path, cfgs, measured, spent_s)  # after every rank count: a later --reuse resumes here
    return measured, spent_s


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        profile = load_profile(args.profile)
        profile.check_matches(backend=args.backend, dtype="float32")
        if args.compare and not os.path.isfile(args.compare):
            raise FileNotFoundError(f"--compare {args.compare}: no such file (a sweep_raw.json of another run)")
        if profile.max_ranks < max(RANKS):
            raise ValueError(
                f"{args.profile}: the sweep needs rank counts up to {max(RANKS)}; the profile covers "
                f"{profile.max_ranks}"
            )
    except (ValueError, FileNotFoundError) as err:
        print(f"validate_agp: error: {err}", file=sys.stderr)
        return 2
    cfgs = configs(args.quick)
    os.makedirs(args.out_dir, exist_ok=True)
    raw_path = os.path.join(args.out_dir, "sweep_raw.json")
    measured, spent_s = _measure(args, cfgs, profile, raw_path)
    rows, summary = evaluate(cfgs, measured, profile)
    summary["measurement_wall_s"] = spent_s
    summary["profile"] = args.profile
    if args.compare:
        summary["repeatability"] = {
            "against": args.compare,
            **repeatability(cfgs, measured, _load_raw(args.compare, cfgs)[0]),
        }
    with open(os.path.join(args.out_dir, "sweep.json"), "w") as f:
        json.dump({"summary": summary, "rows": rows}, f, indent=1)
    text = markdown(rows, summary)
    with open(os.path.join(args.out_dir, "sweep.md"), "w") as f:
        f.write(text)
    plots(rows, args.out_dir)
    print(text)
    print(
        f"sweep done ({summary['measurement_wall_s']:.0f} s of measurements); wrote {args.out_dir}/sweep.json, "
        "sweep.md, predicted_vs_measured.png, strategy_map.png"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
