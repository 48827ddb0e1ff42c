"""Train every fixed split (or every seed) of a config and print mean ± std per metric, the way
papers report: a markdown table and JSON.

    python -m tools.reports.sweep --config ds_configs/cpu_quickstart.json \
        --dataset ../shared/datasets/heterophilous/squirrel_filtered.npz --epochs 100

Each split (``--splits``, default every split the dataset's [S, N] masks hold) or seed (``--seeds``)
is one full training run of the config; ``--nprocs`` ranks run them one after another in one
process group (spawned gloo/NCCL processes, no launcher start-up per run). Reported per run: the
test value of the configured metric at the best validation epoch, the best validation value and
the last epoch's test value (and accuracy beside another metric). Std is the sample standard
deviation (ddof=1) over the runs. A link task (``"task": "link"``) also reports every other test
metric (AP, MRR, Hits@K, ...) at the epoch its validation metric picked.

``--grid GRID.json --results RESULTS.json --page PAGE.md``: a grid of variants over several graphs
instead (``tools/reports/sweep_grid.py``), e.g. the model sweep that chose the presets::

    python -m tools.reports.sweep --grid tools/reports/model_grid.json \
        --results docs/benchmarks/2026-12-04-model-sweep.json --page docs/benchmarks/2026-12-04-model-sweep.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tools.reports.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="ds_configs/cpu_quickstart.json", help='DeepSpeed JSON with a "dsgraph" section')
    p.add_argument("--dataset", help="dataset (default: the config's)")
    p.add_argument("--splits", help="comma-separated split indices (default: every split of the dataset's masks)")
    p.add_argument("--seeds", help="comma-separated seeds: one run per seed on the config's split, instead of splits")
    p.add_argument("--epochs", type=int, help="epochs per run (default: the config's)")
    p.add_argument("--metric", help="metric (default: the config's, or per task)")
    p.add_argument("--nprocs", type=int, default=1, help="ranks per run")
    p.add_argument("--json", dest="json_out", help="also write the per-run rows and the summary here")
    g = p.add_argument_group("grid (tools/reports/sweep_grid.py)")
    g.add_argument("--grid", help="a grid file of graphs and variants: measure its cells instead of one config")
    g.add_argument("--results", help="the grid's raw results (JSON): cells already there are not measured again")
    g.add_argument("--page", help="markdown page whose table (between the sweep markers) is rewritten")
    g.add_argument("--cells", nargs="+", help="only these cells, as VARIANT/GRAPH (either may be *)")
    g.add_argument("--max-cells", type=int, help="measure at most N cells (a slice; 0: table only)")
    g.add_argument("--rerun", action="store_true", help="measure the chosen cells again even if the results hold them")
    g.add_argument("--datasets", default="../shared/datasets", help="what {datasets} in the grid's paths means")
    return p.parse_args(argv)


def plan_runs(cfg, seeds=None, splits=None) -> list[dict]:
    """The config overrides of each run: one per seed, per split, or per fixed split of the dataset."""
    if seeds:
        return [{"seed": int(s)} for s in seeds]
    if splits:
        return [{"split": int(s)} for s in splits]
    from dsgraph.graph.datasets import dataset_file
    from dsgraph.graph.rank_reader import DatasetFile

    path, _ = dataset_file(cfg.dataset, cfg.seed)
    return [{"split": k} for k in range(DatasetFile(path).splits)]


def run_set(config, overrides, seeds=None, nprocs=1, deepspeed=None, splits=None) -> list[dict]:
    """Trains ``config`` with ``overrides`` once per seed or split (``plan_runs``) on ``nprocs`` spawned
    ranks (``deepspeed``: merged into the DeepSpeed part, ``merge``); each run's row: its seed or split,
    the last evaluation and the best-validation one."""
    import torch.multiprocessing as mp

    from dsgraph.comm.ports import free_port
    from dsgraph.train.config import load_ds_config, with_overrides

    _, cfg = load_ds_config(config)
    runs = plan_runs(with_overrides(cfg, overrides, "sweep"), seeds, splits)
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(
            _worker,
            args=(nprocs, free_port(), config, overrides, runs, tmp, deepspeed or {}),
            nprocs=nprocs,
            start_method="spawn",
        )
        return [json.load(open(os.path.join(tmp, f"run{i}.json"))) for i in range(len(runs))]


def merge(base: dict, extra: dict) -> dict:
    """``base`` with ``extra``'s keys, objects merged key by key (``{"optimizer": {"params": {"lr": 0.01}}}``
    changes only the learning rate)."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _worker(rank, world, port, config, overrides, runs, out_dir, deepspeed):
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    import deepspeed.comm as dist
    import torch

    from dsgraph.runtime import extensions
    from dsgraph.train.config import load_ds_config, with_overrides
    from dsgraph.train.trainer import Trainer, init_distributed

    device = init_distributed()
    ds, cfg = load_ds_config(config)
    if device.type == "cpu":
        ds, _ = extensions.prefer_torch_adam(ds)
    ds = {**ds, "tensorboard": {"enabled": False}}
    ds = merge(ds, deepspeed)
    for i, run in enumerate(runs):
        run_cfg = with_overrides(
            cfg, {**overrides, **run, "metrics_out": None, "checkpoint_every": 0, "run_name": f"sweep-{i}"}, "sweep"
        )
        result = Trainer(run_cfg, ds, device, log=lambda line: None).fit(log=lambda line: None)
        if rank == 0:
            with open(os.path.join(out_dir, f"run{i}.json"), "w") as f:
                json.dump({**run, "last": result["last"], "best": result["best"]}, f)
        torch.distributed.barrier()
    dist.destroy_process_group()


def summarise(rows: list[dict]) -> dict[str, dict]:
    """name -> {mean, std, n} over the runs, for the numbers every run reports."""
    metric = rows[0]["best"]["metric"]
    key = "acc" if metric == "accuracy" else metric
    columns = {
        f"test_{key}_at_best_val": lambda r: r["best"]["test"],
        f"best_val_{key}": lambda r: r["best"]["val"],
        f"test_{key}_last": lambda r: r["last"][f"test_{key}"],
    }
    if key != "acc":
        columns["test_acc_last"] = lambda r: r["last"]["test_acc"]
    for name in rows[0]["best"].get("tests", {}):  # every test column at the best epoch (a link task's AP, MRR, Hits@K)
        if name != f"test_{key}":
            columns[f"{name}_at_best_val"] = lambda r, name=name: r["best"]["tests"][name]
    out = {}
    for name, get in columns.items():
        values = np.array([get(r) for r in rows], dtype=float)
        out[name] = {
            "mean": float(values.mean()),
            "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
            "n": len(values),
        }
    return out


def markdown(summary: dict, title: str) -> str:
    lines = [f"**{title}**", "", "| metric | mean ± std | runs |", "| --- | --- | --- |"]
    lines += [f"| {name} | {100 * s['mean']:.2f} ± {100 * s['std']:.2f} | {s['n']} |" for name, s in summary.items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    from dsgraph.tasks.published import published_line
    from dsgraph.train.config import load_ds_config, with_overrides

    args = parse_args(argv)
    if args.grid:
        from tools.reports.sweep_grid import run_grid

        if not args.results:
            raise SystemExit("--grid needs --results FILE (the raw results, read and extended)")
        return run_grid(args.grid, args.results, args.page, args)
    _, cfg = load_ds_config(args.config)
    overrides = {
        k: v for k, v in (("dataset", args.dataset), ("epochs", args.epochs), ("metric", args.metric)) if v is not None
    }
    cfg = with_overrides(cfg, overrides, "sweep")
    seeds = args.seeds.split(",") if args.seeds else None
    splits = args.splits.split(",") if args.splits else None
    rows = run_set(args.config, overrides, seeds, args.nprocs, splits=splits)
    summary = summarise(rows)
    kind = "seeds" if args.seeds else "splits"
    title = (
        f"{os.path.basename(cfg.dataset)}: {len(rows)} {kind}, {cfg.epochs} epochs, {args.nprocs} rank(s), "
        f"{os.path.basename(args.config)}"
    )
    print(markdown(summary, title))
    published = published_line(cfg.dataset) if cfg.task == "node" else None
    if published:
        print(published)
    report = {"title": title, "summary": summary, "runs": rows}
    print(json.dumps({"title": title, "summary": summary}))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
