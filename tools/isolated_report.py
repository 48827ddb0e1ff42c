#!/usr/bin/env python
"""Isolated (Grappa) training vs full-graph GP-AG on Cora: mean test accuracy over seeds for 2- and
4-layer models on 2 and 4 ranks, bytes per epoch, and the super-epoch switch time with and without
prefetch. Prints markdown tables.

    .venv/bin/python tools/isolated_report.py [--ranks 2 4] [--seeds 0 1 2] [--layers 2 4] [--epochs 100]

Each rank count is one `deepspeed` launch that trains every (layers, strategy, seed) in turn with
the same model, optimizer and epochs (from --config, default ds_configs/cpu_isolated.json; its strategy key is overridden per run).
Bytes per epoch and rank: dsgraph's measured activation traffic (CommStats, forward and backward
of every layer) plus DeepSpeed's gradient reduction, counted as a ring all-reduce of every
parameter in the engine's communication dtype: params * bytes * 2 * (W - 1) / W.
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _rows(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def _train(base, ds_config: dict, device, tmp: str, **overrides) -> dict:
    """One run on every rank; rank 0 returns its summary (others return {})."""
    import deepspeed.comm as dist
    import torch.distributed

    from dsgraph.train.trainer import Trainer

    metrics = os.path.join(tmp, "metrics.jsonl")
    mode = "isolated" if overrides.get("strategy") == "isolated" else "full"  # 'isolated' spells the mode
    cfg = dataclasses.replace(base, metrics_out=metrics, checkpoint_every=0, mode=mode, **overrides)
    trainer = Trainer(cfg, ds_config, device, log=lambda line: None)
    trainer.fit(log=lambda line: None)
    gathered = [None] * dist.get_world_size()
    torch.distributed.all_gather_object(gathered, getattr(trainer.mode, "switch_times", []))
    engine = trainer.engine
    params = sum(p.numel() for p in engine.module.parameters())
    comm_dtype = getattr(engine, "communication_data_type", None)
    elem = comm_dtype.itemsize if comm_dtype is not None else next(engine.module.parameters()).element_size()
    out = {}
    if dist.get_rank() == 0:
        rows = _rows(metrics)
        steps = [r for r in rows if r["kind"] == "step"]
        evals = [r for r in rows if r["kind"] == "eval"]
        w = dist.get_world_size()
        out = {
            "test_last": evals[-1]["test_acc"],
            "test_at_best_val": evals[-1]["test_acc_at_best_val"],
            "activation_bytes": statistics.mean(r["comm_bytes"] for r in steps),
            "grad_bytes": params * elem * 2 * (w - 1) / w,
            "params": params,
            "grad_elem_bytes": elem,
            "step_time_s": statistics.median(r["step_time_s"] for r in steps),
            # (super_epoch, stall, load) of every rank; super-epoch 0 is a cold start either way
            "switches": [t for per_rank in gathered for t in per_rank if t[0] > 0],
        }
    del trainer, engine
    gc.collect()
    return out


def worker(args) -> int:
    """Runs inside the deepspeed launcher: all runs for this rank count; rank 0 writes --out."""
    import deepspeed.comm as dist

    from dsgraph.train.config import load_ds_config
    from dsgraph.train.trainer import init_distributed

    ds_config, base = load_ds_config(args.config)
    ds_config.pop("tensorboard", None)
    base = dataclasses.replace(base, dataset="cora", epochs=args.epochs, eval_every=args.eval_every,
                               isolated_chunks=args.chunks if args.chunks is not None else base.isolated_chunks)  # fmt: skip
    device = init_distributed()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = [("ag", base.isolated_correction, base.chunk_method)] * (not args.skip_ag)
        runs += [("isolated", c, m) for m in args.chunk_methods or [base.chunk_method]
                 for c in args.corrections or [base.isolated_correction]]  # fmt: skip
        for layers in args.layers:
            for strategy, correction, method in runs:
                for seed in args.seeds:
                    r = _train(base, ds_config, device, tmp, strategy=strategy, seed=seed, layers=layers,
                               isolated_correction=correction, chunk_method=method)  # fmt: skip
                    chunks = f"C={base.isolated_chunks}" if base.isolated_chunks else "C=2W"
                    label = strategy if strategy == "ag" else f"isolated/{chunks} {method}/{correction}"
                    results.append({"layers": layers, "strategy": strategy, "variant": label, "seed": seed, "prefetch": True, **r})
                    if dist.get_rank() == 0:
                        print(f"ranks {dist.get_world_size()} layers {layers} {label} seed {seed}: "
                              f"test {100 * r['test_last']:.1f}%", flush=True)  # fmt: skip
        # switch stalls without prefetch: a short run with a few switches
        short = args.repart_every * 5
        for prefetch in (False, True) if not args.skip_switch else ():
            r = _train(base, ds_config, device, tmp, strategy="isolated", seed=args.seeds[0], layers=args.layers[0],
                       epochs=short, eval_every=short, repart_every=args.repart_every, isolated_prefetch=prefetch)  # fmt: skip
            results.append({"layers": args.layers[0], "strategy": "isolated-switch", "seed": args.seeds[0], "prefetch": prefetch, **r})
    if dist.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def _variant(row: dict) -> str:
    return row.get("variant", "isolated/C=2W random/coverage").replace("/random/", "/C=2W random/").replace("/metis/", "/C=2W metis/")


def report(results: dict[int, list[dict]], args) -> None:
    print(f"\nCora, {args.epochs} epochs, seeds {args.seeds}, config {args.config}; isolated variants: chunk count "
          f"(C), chunk method / correction; repart_every from the config (default 5)\n")  # fmt: skip
    print("| ranks | layers | isolated variant (chunks/correction) | GP-AG test acc (last) | isolated test acc (last) | gap (pts) "
          "| GP-AG at best val | isolated at best val | gap (pts) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for w, rows in sorted(results.items()):
        for layers in args.layers:
            ag = [r for r in rows if r["layers"] == layers and r["strategy"] == "ag"]
            variants = sorted({_variant(r) for r in rows if r["strategy"] == "isolated"})
            for variant in variants:
                iso = [r for r in rows if r["layers"] == layers and r["strategy"] == "isolated" and _variant(r) == variant]
                a, i = _mean(r["test_last"] for r in ag), _mean(r["test_last"] for r in iso)
                ab, ib = _mean(r["test_at_best_val"] for r in ag), _mean(r["test_at_best_val"] for r in iso)
                print(f"| {w} | {layers} | {variant.split('/', 1)[1]} | {100 * a:.2f}% | {100 * i:.2f}% | {100 * (i - a):+.2f} "
                      f"| {100 * ab:.2f}% | {100 * ib:.2f}% | {100 * (ib - ab):+.2f} |")
    print("\n| ranks | layers | GP-AG activations / epoch / rank | gradients / epoch / rank | GP-AG total | isolated total | median step GP-AG | median step isolated |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for w, rows in sorted(results.items()):
        for layers in args.layers:
            ag = [r for r in rows if r["layers"] == layers and r["strategy"] == "ag"]
            iso = [r for r in rows if r["layers"] == layers and r["strategy"] == "isolated"]
            if not ag or not iso:
                continue
            act, grad = _mean(r["activation_bytes"] for r in ag), ag[0]["grad_bytes"]
            print(f"| {w} | {layers} | {act / 2**20:.2f} MiB | {grad / 2**20:.2f} MiB ({ag[0]['params']:,} params x "
                  f"{ag[0]['grad_elem_bytes']} B) | {(act + grad) / 2**20:.2f} MiB | "
                  f"{(_mean(r['activation_bytes'] for r in iso) + grad) / 2**20:.2f} MiB | "
                  f"{1e3 * _mean(r['step_time_s'] for r in ag):.0f} ms | {1e3 * _mean(r['step_time_s'] for r in iso):.0f} ms |")  # fmt: skip
    print("\n| ranks | prefetch | switches | mean stall | max stall | mean load time |")
    print("| --- | --- | --- | --- | --- | --- |")
    for w, rows in sorted(results.items()):
        for prefetch in (False, True):
            sw = [t for r in rows if r["strategy"] == "isolated-switch" and r["prefetch"] == prefetch for t in r["switches"]]
            if sw:
                print(f"| {w} | {'on' if prefetch else 'off'} | {len(sw)} | {1e3 * _mean(t[1] for t in sw):.1f} ms | "
                      f"{1e3 * max(t[1] for t in sw):.1f} ms | {1e3 * _mean(t[2] for t in sw):.1f} ms |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="ds_configs/cpu_isolated.json")
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--layers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--epochs", type=int, default=100, help="epochs per run (the quickstart config has 200)")
    p.add_argument("--eval-every", type=int, default=10, dest="eval_every")
    p.add_argument("--repart-every", type=int, default=5, dest="repart_every", help="for the switch-time runs")
    p.add_argument("--corrections", nargs="+", help="isolated corrections to compare (default: the config's)")
    p.add_argument("--chunk-methods", nargs="+", dest="chunk_methods", help="isolated chunk methods (default: the config's)")
    p.add_argument("--chunks", type=int, help="isolated_chunks for the isolated runs (default: the config's; 0 = 2 x ranks)")
    p.add_argument("--skip-ag", action="store_true", dest="skip_ag", help="isolated runs only (with --results of an earlier run)")
    p.add_argument("--skip-switch", action="store_true", dest="skip_switch", help="no switch-time runs")
    p.add_argument("--results", help="reuse or keep the raw results in this JSON file (one key per rank count)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--local_rank", type=int, default=-1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    results: dict[int, list[dict]] = {}
    if args.results and os.path.exists(args.results):
        with open(args.results) as f:
            results = {int(k): v for k, v in json.load(f).items()}
    launcher = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    for w in args.ranks:
        if w in results:
            continue
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
        cmd = [launcher, f"--num_accelerators={w}", os.path.abspath(__file__), "--worker", "--out", out,
               "--config", args.config, "--epochs", str(args.epochs), "--eval-every", str(args.eval_every),
               "--repart-every", str(args.repart_every), "--seeds", *map(str, args.seeds),
               "--layers", *map(str, args.layers)]  # fmt: skip
        for flag, values in (("--corrections", args.corrections), ("--chunk-methods", args.chunk_methods)):
            cmd += [flag, *values] if values else []
        cmd += ["--chunks", str(args.chunks)] if args.chunks is not None else []
        cmd += ["--skip-ag"] * args.skip_ag + ["--skip-switch"] * args.skip_switch
        subprocess.run(cmd, check=True)
        with open(out) as f:
            results[w] = json.load(f)
        os.unlink(out)
        if args.results:
            with open(args.results, "w") as f:
                json.dump(results, f)
    report(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
