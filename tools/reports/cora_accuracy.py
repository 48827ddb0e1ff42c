#!/usr/bin/env python
"""Trains a config on Cora through the real launcher (deepspeed --num_accelerators R) for several
seeds, rank counts and depths, and prints the test accuracy of every run at the last epoch and at the
best-validation epoch (the trainer's ``test_acc_at_best_val``), the mean and sample standard
deviation over seeds, the difference between rank counts and between depths, per precision.

    .venv/bin/python -m tools.reports.cora_accuracy [--config ds_configs/cpu_quickstart.json] [--seeds 0 1 2]
        [--ranks 1 2] [--layers 2 4] [--precision fp32 bf16] [--json-out FILE]
    .venv/bin/python -m tools.reports.cora_accuracy --from-json a.json b.json   # the tables of saved runs, no training

``--layers`` overrides the config's "layers" (attention layers, the output layer included) and
``--precision`` its "bf16" section (default: the config's own); every other setting is the config's.
Runs go one at a time; on the 2-core machine one 2-rank run of 200 epochs takes about a minute.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile

from dsgraph.comm.ports import free_port


def config_precision(config: str) -> str:
    with open(config) as f:
        return "bf16" if json.load(f).get("bf16", {}).get("enabled", False) else "fp32"


def config_variant(config: str, layers: int, precision: str, out_dir: str) -> str:
    """A copy of ``config`` with ``layers`` in its "dsgraph" section and bf16 on or off (a file in ``out_dir``)."""
    return write_variant(
        config, out_dir, f"layers{layers}_{precision}", {"layers": layers}, bf16={"enabled": precision == "bf16"}
    )


def write_variant(config: str, out_dir: str, name: str, dsgraph: dict, **top) -> str:
    """A copy of ``config`` with keys of its "dsgraph" section and top-level keys replaced, TensorBoard
    off, written to ``out_dir``/``name``.json; returns its path."""
    with open(config) as f:
        ds = json.load(f)
    ds.setdefault("dsgraph", {}).update(dsgraph)
    ds.update(top, tensorboard={"enabled": False})
    path = os.path.join(out_dir, f"{name}.json")
    with open(path, "w") as f:
        json.dump(ds, f, indent=1)
    return path


def train_rows(config: str, seed: int, ranks: int, out_dir: str) -> list[dict]:
    """One training run through the launcher; returns its metrics rows (step and eval)."""
    tag = f"{os.path.basename(config)}_seed{seed}_ranks{ranks}"
    metrics = os.path.join(out_dir, f"{tag}.jsonl")
    launcher = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    cmd = [
        launcher,
        f"--num_accelerators={ranks}",
        f"--master_port={free_port()}",
        "launch/train.py",
        "--deepspeed_config",
        config,
        "--seed",
        str(seed),
        "--metrics-out",
        metrics,
        "--checkpoint-every",
        "0",
    ]
    with open(os.path.join(out_dir, f"{tag}.log"), "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        with open(log.name) as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"training failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    with open(metrics) as f:
        return [json.loads(line) for line in f]


def run(config: str, seed: int, ranks: int, out_dir: str) -> dict:
    """One training run; returns its test accuracy at the last epoch and at the best-validation epoch."""
    evals = [row for row in train_rows(config, seed, ranks, out_dir) if row["kind"] == "eval"]
    return {"last": evals[-1]["test_acc"], "best_val": evals[-1]["test_acc_at_best_val"]}


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value), in percent."""
    pct = [100 * v for v in values]
    return statistics.mean(pct), statistics.stdev(pct) if len(pct) > 1 else 0.0


def table(results: dict, seeds: list[int], ranks: list[int], layers: list[int], precisions: list[str]) -> list[str]:
    """One row per (precision, layers, ranks): per-seed accuracies, mean and std, at the last epoch and at best val."""
    seed_cols = " | ".join(f"seed {s}" for s in seeds)
    lines = [f"| precision | layers | ranks | at | {seed_cols} | mean | std |", "| --- " * (6 + len(seeds)) + "|"]
    for prec in precisions:
        for depth in layers:
            for r in ranks:
                for key, label in (("last", "last epoch"), ("best_val", "best val")):
                    accs = [results[prec, depth, r, s][key] for s in seeds]
                    mean, std = mean_std(accs)
                    cells = " | ".join(f"{100 * a:.1f}" for a in accs)
                    lines.append(f"| {prec} | {depth} | {r} | {label} | {cells} | {mean:.2f} | {std:.2f} |")
    return lines


def gaps(results: dict, seeds: list[int], ranks: list[int], layers: list[int], prec: str) -> list[str]:
    """Differences of means in one precision: between the first two rank counts (per depth), between the
    first depth and each other (per rank count)."""

    def mean(depth, r, key):
        return mean_std([results[prec, depth, r, s][key] for s in seeds])[0]

    lines = []
    for key, label in (("best_val", "best val"), ("last", "last epoch")):
        if len(ranks) >= 2:
            for depth in layers:
                a, b = ranks[:2]
                lines.append(
                    f"{prec} {label}: {depth} layers, mean on {a} rank(s) - mean on {b} ranks = "
                    f"{mean(depth, a, key) - mean(depth, b, key):+.2f} points"
                )
        for depth in layers[1:]:
            for r in ranks:
                lines.append(
                    f"{prec} {label}: {r} rank(s), mean with {layers[0]} layers - mean with {depth} = "
                    f"{mean(layers[0], r, key) - mean(depth, r, key):+.2f} points"
                )
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="ds_configs/cpu_quickstart.json", help='DeepSpeed JSON with a "dsgraph" section')
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="rank counts (CPU processes) to train on")
    p.add_argument("--layers", type=int, nargs="+", default=[2, 4], help="depths (the config's 'layers') to train")
    p.add_argument(
        "--precision", nargs="+", choices=("fp32", "bf16"), help="train in these (default: the config's bf16 setting)"
    )
    p.add_argument("--json-out", help="also write every run's result to this JSON file")
    p.add_argument(
        "--from-json",
        nargs="+",
        metavar="FILE",
        help="print the tables of runs saved with --json-out instead of training",
    )
    args = p.parse_args(argv)
    if args.from_json:
        return report_saved(args.from_json)
    precisions = args.precision or [config_precision(args.config)]
    results = train_all(args, precisions)
    report(results, args.config, args.seeds, args.ranks, args.layers, precisions)
    if args.json_out:
        with open(args.json_out, "w") as f:
            rows = [
                {"config": args.config, "precision": pr, "layers": d, "ranks": r, "seed": s, **v}
                for (pr, d, r, s), v in results.items()
            ]
            json.dump(rows, f, indent=1)
    return 0


def train_all(args, precisions: list[str]) -> dict:
    """(precision, layers, ranks, seed) -> {"last", "best_val"} for every combination, one run at a time."""
    results = {}
    with tempfile.TemporaryDirectory() as out_dir:
        for prec in precisions:
            for depth in args.layers:
                config = config_variant(args.config, depth, prec, out_dir)
                for seed in args.seeds:
                    for ranks in args.ranks:
                        r = results[prec, depth, ranks, seed] = run(config, seed, ranks, out_dir)
                        print(
                            f"{prec} layers {depth} ranks {ranks} seed {seed}: test_acc last {100 * r['last']:.1f}%  "
                            f"at best val {100 * r['best_val']:.1f}%",
                            flush=True,
                        )
    return results


def report(
    results: dict, config: str, seeds: list[int], ranks: list[int], layers: list[int], precisions: list[str]
) -> None:
    print(f"\nTest accuracy (%) with {config}; std is the sample standard deviation over seeds.\n")
    print("\n".join(table(results, seeds, ranks, layers, precisions)))
    for prec in precisions:
        print("\n" + "\n".join(gaps(results, seeds, ranks, layers, prec)))


def report_saved(paths: list[str]) -> int:
    """The tables of the runs in ``paths`` (files written by --json-out; one config, every combination present)."""
    rows = []
    for path in paths:
        with open(path) as f:
            rows += json.load(f)
    configs = sorted({row["config"] for row in rows})
    if len(configs) != 1:
        raise SystemExit(
            f"--from-json: the files hold runs of {len(configs)} configs ({', '.join(configs)}); give runs of one"
        )
    results = {(row["precision"], row["layers"], row["ranks"], row["seed"]): row for row in rows}
    seeds, ranks, layers, precisions = (sorted({key[i] for key in results}) for i in (3, 2, 1, 0))
    missing = [k for k in itertools.product(precisions, layers, ranks, seeds) if k not in results]
    if missing:
        raise SystemExit(f"--from-json: missing runs (precision, layers, ranks, seed): {missing}")
    report(results, configs[0], seeds, ranks, layers, precisions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
