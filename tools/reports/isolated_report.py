#!/usr/bin/env python
"""Isolated (Grappa) training beside full-graph GP-AG: bytes and synchronisations per epoch (Cora
and rmat graphs), and test accuracy at several depths per correction method and seed (Cora).
Prints markdown tables.

    .venv/bin/python -m tools.reports.isolated_report --part bytes --datasets cora rmat:16 \
        --results runs/isolated_report.json
    .venv/bin/python -m tools.reports.isolated_report --part accuracy --layers 2 --results runs/isolated_report.json
    .venv/bin/python -m tools.reports.isolated_report --part tables --results runs/isolated_report.json

Every run uses --config (default ds_configs/cpu_isolated.json: ZeRO-0, fp32) with the overrides of
its variant. Runs already in --results are not repeated, so a long report can be made in parts.

Bytes per epoch and rank come from the step rows: the sum over an epoch's rows of
``comm_bytes`` (activations, and halo features in isolated mode) and ``sync_bytes`` (DeepSpeed's
gradient reduction as counted by ``dsgraph.modes.sync``, or the parameter average at super-epoch
boundaries), averaged over the run's epochs; a synchronisation is a step with ``sync_bytes`` > 0.
Variants of the bytes part:

- ``ag``: full-graph GP-AG, one step per epoch;
- ``isolated``: the config's isolated training (the seed's: local steps, sync per super-epoch);
- ``isolated-fp32``: the same, sending fp32 instead of bf16;
- ``isolated-step``: today's behaviour before the super-epoch sync: DeepSpeed reduces gradients in
  every step, one step of all the rank's training nodes per epoch, no halo cache;
- ``isolated-step-zero2-bf16``: the same under the ZeRO-2 bf16 engine that isolated mode shipped with;
- ``isolated-no-prefetch``: ``isolated`` loading each super-epoch's chunks at the switch (its stall).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile

CORRECTIONS = ("resample", "uniform", "coverage", "none")
TODAY = {"isolated_sync": "step", "isolated_batch_size": 0, "isolated_halo_fraction": 0.0}
VARIANTS = {  # name -> (dsgraph overrides, DeepSpeed overrides)
    "ag": ({"mode": "full", "strategy": "ag"}, {}),
    "isolated": ({}, {}),
    "isolated-fp32": ({"isolated_comm_dtype": "float32"}, {}),
    "isolated-step": (TODAY, {}),
    "isolated-step-zero2-bf16": (TODAY, {"zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}),
    "isolated-no-prefetch": ({"isolated_prefetch": False}, {}),
    **{f"isolated/{c}": ({"isolated_correction": c}, {}) for c in CORRECTIONS},
}
BYTES_VARIANTS = (
    "ag",
    "isolated",
    "isolated-fp32",
    "isolated-step",
    "isolated-step-zero2-bf16",
    "isolated-no-prefetch",
)


def run_key(run: dict) -> str:
    return (
        f"{run['part']}|{run['ranks']}|{run['dataset']}|{run['variant']}"
        f"|L{run['layers']}|s{run['seed']}|e{run['epochs']}"
    )


def _summary(rows: list[dict], epochs: int) -> dict:
    """Per-epoch bytes and synchronisations, accuracy and timing from one run's metrics rows."""
    steps = [r for r in rows if r["kind"] == "step"]
    evals = [r for r in rows if r["kind"] == "eval"]
    per_epoch = lambda key: sum(r.get(key, 0) for r in steps) / epochs  # noqa: E731
    switches = [
        r for a, r in zip(steps, steps[1:]) if "super_epoch" in r and r["super_epoch"] != a["super_epoch"]
    ]  # not the cold start
    return {
        "test_last": evals[-1]["test_acc"],
        "test_at_best_val": evals[-1]["test_acc_at_best_val"],
        "comm_per_epoch": per_epoch("comm_bytes"),
        "sync_per_epoch": per_epoch("sync_bytes"),
        "halo_per_epoch": per_epoch("halo_bytes"),
        "steps_per_epoch": len(steps) / epochs,
        "syncs_per_epoch": sum(r["sync_bytes"] > 0 for r in steps) / epochs,
        "step_time_s": statistics.median(r["step_time_s"] for r in steps),
        "halo_hit_rate": statistics.mean(r["halo_hit_rate"] for r in steps) if "halo_hit_rate" in steps[0] else None,
        "stall_s": [r["switch_time_s"] for r in switches],
        "halo_time_s": [r["halo_time_s"] for r in switches],
    }


def _train(base, ds_config: dict, device, tmp: str, run: dict) -> dict:
    """One run on every rank; rank 0 returns its summary (the others {})."""
    import deepspeed.comm as dist

    from dsgraph.train.trainer import Trainer

    overrides, ds_overrides = VARIANTS[run["variant"]]
    metrics = os.path.join(tmp, "metrics.jsonl")
    fields = {"mode": "isolated", **overrides}
    cfg = dataclasses.replace(
        base,
        dataset=run["dataset"],
        layers=run["layers"],
        seed=run["seed"],
        epochs=run["epochs"],
        eval_every=min(base.eval_every, run["epochs"]),
        metrics_out=metrics,
        checkpoint_every=0,
        **fields,
    )
    trainer = Trainer(cfg, {**ds_config, **ds_overrides}, device, log=lambda line: None)
    trainer.fit(log=lambda line: None)
    out = {}
    if dist.get_rank() == 0:
        with open(metrics) as f:
            out = _summary([json.loads(line) for line in f], run["epochs"])
        out["params"] = sum(p.numel() for p in trainer.engine.module.parameters())
    del trainer
    gc.collect()
    return out


def worker(args) -> int:
    """Runs inside the deepspeed launcher: every run of --runs; rank 0 writes --out."""
    import deepspeed.comm as dist

    from dsgraph.train.config import load_ds_config
    from dsgraph.train.trainer import init_distributed

    ds_config, base = load_ds_config(args.config)
    ds_config.pop("tensorboard", None)
    device = init_distributed()
    with open(args.runs) as f:
        runs = json.load(f)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            summary = _train(base, ds_config, device, tmp, run)
            if dist.get_rank() == 0:
                results[run_key(run)] = {**run, **summary}
                print(
                    f"{run_key(run)}: test {100 * summary['test_last']:.1f}%, "
                    f"{(summary['comm_per_epoch'] + summary['sync_per_epoch']) / 1e3:.1f} kB/epoch",
                    flush=True,
                )
                with open(args.out, "w") as f:  # after every run, so a stopped report keeps what it made
                    json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def planned_runs(args) -> list[dict]:
    """The runs the chosen part needs, for every rank count."""
    runs = []
    for w in args.ranks:
        if args.part == "bytes":
            runs += [
                dict(
                    part="bytes",
                    ranks=w,
                    dataset=d,
                    variant=v,
                    layers=args.layers[0],
                    seed=args.seeds[0],
                    epochs=args.bytes_epochs,
                )
                for d in args.datasets
                for v in args.variants
            ]
        elif args.part == "accuracy":
            variants = ["ag", *(f"isolated/{c}" for c in args.corrections), *args.extra]
            runs += [
                dict(part="accuracy", ranks=w, dataset="cora", variant=v, layers=layers, seed=s, epochs=args.epochs)
                for layers in args.layers
                for v in variants
                for s in args.seeds
            ]
    return runs


def launch(runs: list[dict], ranks: int, args) -> dict:
    """One deepspeed launch on ``ranks`` ranks that trains ``runs`` in turn; returns their results."""
    launcher = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = os.path.join(tmp, "runs.json"), os.path.join(tmp, "out.json")
        with open(spec, "w") as f:
            json.dump(runs, f)
        cmd = [
            launcher,
            f"--num_accelerators={ranks}",
            os.path.abspath(__file__),
            "--worker",
            "--runs",
            spec,
            "--out",
            out,
            "--config",
            args.config,
        ]
        done = subprocess.run(cmd)
        results = json.load(open(out)) if os.path.exists(out) else {}
    if done.returncode:
        print(
            f"isolated_report: the launch on {ranks} ranks exited with {done.returncode}; kept {len(results)} runs",
            file=sys.stderr,
        )
    return results


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def _kb(value: float) -> str:
    return f"{value / 1e3:,.1f} kB"


def _ratio(total: dict, v: str, base: str) -> str:
    return f"{total[v] / total[base]:.3f}" if base in total and total[base] else "-"


def bytes_table(results: dict) -> None:
    rows = [r for r in results.values() if r["part"] == "bytes"]
    if not rows:
        return
    print(
        "\n| ranks | dataset | run | steps / epoch | syncs / epoch | comm_bytes / epoch (halo) | sync_bytes / epoch "
        "| total / epoch | vs isolated-step | vs isolated-step-zero2-bf16 | vs ag |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for w, d in sorted({(r["ranks"], r["dataset"]) for r in rows}):
        group = {r["variant"]: r for r in rows if r["ranks"] == w and r["dataset"] == d}
        total = {v: r["comm_per_epoch"] + r["sync_per_epoch"] for v, r in group.items()}
        for v in BYTES_VARIANTS[:-1]:  # the last one differs only in its stall
            if v in group:
                r = group[v]
                print(
                    f"| {w} | {d} | {v} | {r['steps_per_epoch']:.1f} | {r['syncs_per_epoch']:.2f} "
                    f"| {_kb(r['comm_per_epoch'])} "
                    f"({_kb(r['halo_per_epoch'])}) | {_kb(r['sync_per_epoch'])} | {_kb(total[v])} "
                    f"| {_ratio(total, v, 'isolated-step')} "
                    f"| {_ratio(total, v, 'isolated-step-zero2-bf16')} | {_ratio(total, v, 'ag')} |"
                )
    print(
        "\n| ranks | dataset | run | params | median step | halo hit rate | switch stall, mean / max "
        "| halo exchange, mean / max |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in sorted(rows, key=lambda r: (r["ranks"], r["dataset"], BYTES_VARIANTS.index(r["variant"]))):
        times = [
            f"{1e3 * _mean(r[k]):.1f} / {1e3 * max(r[k]):.1f} ms" if r.get(k) else "-"
            for k in ("stall_s", "halo_time_s")
        ]
        hit = f"{100 * r['halo_hit_rate']:.1f}%" if r["halo_hit_rate"] is not None and r["halo_per_epoch"] else "-"
        print(
            f"| {r['ranks']} | {r['dataset']} | {r['variant']} | {r['params']:,} | {1e3 * r['step_time_s']:.0f} ms "
            f"| {hit} | "
            f"{times[0]} | {times[1]} |"
        )


def accuracy_table(results: dict) -> None:
    rows = [r for r in results.values() if r["part"] == "accuracy"]
    if not rows:
        return
    for metric, title in (
        ("test_last", "test accuracy after the last epoch"),
        ("test_at_best_val", "test accuracy at the best validation accuracy"),
    ):
        print(f"\nCora, {title} (%), mean over seeds and each seed; gap to GP-AG at the same depth in points\n")
        print("| ranks | layers | run | mean | gap to ag | seeds |")
        print("| --- | --- | --- | --- | --- | --- |")
        for w, layers in sorted({(r["ranks"], r["layers"]) for r in rows}):
            group = [r for r in rows if r["ranks"] == w and r["layers"] == layers]
            ag = _mean(r[metric] for r in group if r["variant"] == "ag")
            for v in sorted({r["variant"] for r in group}, key=lambda v: (v != "ag", v)):
                runs = sorted((r for r in group if r["variant"] == v), key=lambda r: r["seed"])
                m = _mean(r[metric] for r in runs)
                seeds = ", ".join(f"{r['seed']}: {100 * r[metric]:.1f}" for r in runs)
                print(f"| {w} | {layers} | {v} | {100 * m:.2f} | {100 * (m - ag):+.2f} | {seeds} |")


def acceptance(results: dict, repart_every: int) -> None:
    """The figures of issue 16's acceptance criteria, each with its bound and whether it holds."""
    lines = []
    bytes_rows = [r for r in results.values() if r["part"] == "bytes"]
    for w, d in sorted({(r["ranks"], r["dataset"]) for r in bytes_rows}):
        total = {
            r["variant"]: r["comm_per_epoch"] + r["sync_per_epoch"]
            for r in bytes_rows
            if r["ranks"] == w and r["dataset"] == d
        }
        for base, bound in (("isolated-step", 1 / repart_every), ("ag", 0.10)):
            if "isolated" in total and total.get(base):
                ratio = total["isolated"] / total[base]
                lines.append(
                    f"| {w} ranks, {d}: bytes / epoch, isolated / {base} | {ratio:.3f} | <= {bound:.3f} "
                    f"| {'yes' if ratio <= bound else 'NO'} |"
                )
    acc_rows = [r for r in results.values() if r["part"] == "accuracy"]
    for w, layers in sorted({(r["ranks"], r["layers"]) for r in acc_rows}):
        group = [r for r in acc_rows if r["ranks"] == w and r["layers"] == layers]
        ag = [r["test_last"] for r in group if r["variant"] == "ag"]
        iso = [r["test_last"] for r in group if r["variant"] == "isolated/resample"]
        if ag and iso:
            gap = 100 * (_mean(iso) - _mean(ag))
            ok = abs(gap) <= 2.0 if layers <= 2 else gap >= -1.0
            bound = "within 2 points" if layers <= 2 else ">= -1 point"
            lines.append(
                f"| {w} ranks, Cora {layers} layers: test acc, isolated/resample - ag (mean of {len(iso)} / {len(ag)} "
                "seeds) "
                f"| {gap:+.2f} pts ({100 * _mean(iso):.2f}% vs {100 * _mean(ag):.2f}%) | {bound} "
                f"| {'yes' if ok else 'NO'} |"
            )
    if lines:
        print(
            f"\nAcceptance (issue 16; repart_every {repart_every})\n\n| figure | value | bound | met |\n"
            "| --- | --- | --- | --- |"
        )
        print("\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--part",
        choices=["bytes", "accuracy", "tables"],
        default="tables",
        help="which runs to make (tables: none, print what --results holds)",
    )
    p.add_argument("--config", default="ds_configs/cpu_isolated.json")
    p.add_argument("--ranks", type=int, nargs="+", default=[2])
    p.add_argument("--datasets", nargs="+", default=["cora", "rmat:16"], help="bytes part")
    p.add_argument(
        "--bytes-epochs",
        type=int,
        default=50,
        dest="bytes_epochs",
        help="epochs of a bytes run (a multiple of repart_every)",
    )
    p.add_argument(
        "--variants", nargs="+", default=list(BYTES_VARIANTS), choices=BYTES_VARIANTS, help="runs of the bytes part"
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--layers", type=int, nargs="+", default=[2, 3, 4])
    p.add_argument("--epochs", type=int, default=200, help="epochs of an accuracy run")
    p.add_argument("--corrections", nargs="+", default=list(CORRECTIONS), choices=CORRECTIONS)
    p.add_argument(
        "--extra",
        nargs="*",
        default=[],
        choices=[v for v in VARIANTS if v != "ag"],
        help="more variants for the accuracy part (e.g. isolated-step)",
    )
    p.add_argument("--results", default="runs/isolated_report.json", help="raw results, kept and extended across calls")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--runs", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--local_rank", type=int, default=-1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    results = json.load(open(args.results)) if os.path.exists(args.results) else {}
    for w in args.ranks:
        todo = [r for r in planned_runs(args) if r["ranks"] == w and run_key(r) not in results]
        if todo:
            results.update(launch(todo, w, args))
            os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
            with open(args.results, "w") as f:
                json.dump(results, f, indent=1)
    print(f"config {args.config}; {len(results)} runs in {args.results}")
    bytes_table(results)
    accuracy_table(results)
    from dsgraph.train.config import load_ds_config

    acceptance(results, load_ds_config(args.config)[1].isolated.repart_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
