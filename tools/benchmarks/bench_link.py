"""A link-prediction step beside a node-classification step of the same encoder, same run, alternated.

    python -m tools.benchmarks.bench_link --dataset rmat:18 --nprocs 2 --rounds 5 --json-out link.json
    python -m tools.benchmarks.bench_link --dataset rmat:10 --nprocs 2 --rounds 2     # a small check

Phase 1 (timing): NPROCS gloo ranks build two Trainers on the same dataset and encoder (sizes and
``model`` options from the flags; the node task's output layer has the classes, the link task's the
embedding width): a node task, and a link task (random 85/5/10 edge split, ``--negatives`` per
training edge and step, the ``--decoder``). One warm-up epoch each, then ROUNDS rounds that run one
epoch of each task in turn (the order flips every round). An epoch is one optimizer step on the
whole graph; its time is rank 0's wall time around ``Trainer.train_epoch`` between barriers, so the
link step's negative sampling and its pair exchange plan are inside it. Reported: min and median of
each, their ratio, the trainer's own ``step_time_s`` and ``comm_bytes``.

Phase 2 (memory): each task alone in fresh processes for 2 epochs; per rank the process's peak
resident set (``peak_mem_mb``), as both tasks in one process would share one high-water mark.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

OPTIONS = {
    "transformer": dict(block="transformer", input_projection=True, norm="pre", residual="identity", head="linear"),
    "gat": dict(block="attention", input_projection=False, norm="none", residual="identity", head="attention"),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tools.benchmarks.bench_link", description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="rmat:18", help="cora | rmat:SCALE[:EF] | PATH.npz (default rmat:18)")
    p.add_argument("--nprocs", type=int, default=2, help="gloo ranks (default 2)")
    p.add_argument("--strategy", default="ag", help="graph-parallel strategy (default ag)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds of one step of each task (default 5)")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument(
        "--model", choices=sorted(OPTIONS), default="transformer", help="block options (default transformer)"
    )
    p.add_argument("--embedding-dim", type=int, default=64, help="the link task's embedding width (default 64)")
    p.add_argument("--negatives", type=int, default=1, help="training negatives per training edge (default 1)")
    p.add_argument("--decoder", choices=["dot", "mlp"], default="dot")
    p.add_argument("--json-out", help="write the figures to this JSON file")
    return p.parse_args(argv)


def settings(args, task: str) -> dict:
    cfg = dict(
        dataset=args.dataset,
        strategy=args.strategy,
        hidden=args.hidden,
        heads=args.heads,
        layers=args.layers,
        dropout=0.1,
        input_dropout=0.0,
        attention_dropout=0.0,
        model=OPTIONS[args.model],
        epochs=10**6,
        seed=0,
        metrics_out=None,
        checkpoint_every=0,
        run_name=f"bench-{task}",
        task=task,
    )
    if task == "link":
        cfg["link"] = dict(embedding_dim=args.embedding_dim, negatives=args.negatives, decoder=args.decoder)
    return cfg


DS = {
    "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 1.0,
    "steps_per_print": 10**9,
    "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
    "zero_optimization": {"stage": 2},
    "bf16": {"enabled": False},
}


def _timed_epoch(trainer, epoch: int) -> tuple[float, dict]:
    import time

    import torch.distributed as tdist

    tdist.barrier()
    began = time.perf_counter()
    row = trainer.train_epoch(epoch)
    tdist.barrier()
    return time.perf_counter() - began, row


def _worker(rank, world, port, args, phase, out_dir):
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    import deepspeed.comm as dist
    import torch

    from dsgraph.train.config import DsgraphConfig
    from dsgraph.train.trainer import Trainer, init_distributed

    device = init_distributed()
    tasks = ("node", "link") if phase == "time" else (phase,)
    quiet = lambda line: None  # noqa: E731
    trainers = {
        t: Trainer(DsgraphConfig.from_dict(settings(args, t)), DS, device, log=print if rank == 0 else quiet)
        for t in tasks
    }
    times = {t: [] for t in tasks}
    rows = {t: [] for t in tasks}
    for t in tasks:
        _timed_epoch(trainers[t], 0)  # warm-up
    for r in range(args.rounds if phase == "time" else 1):
        for t in tasks if r % 2 == 0 else tasks[::-1]:
            seconds, row = _timed_epoch(trainers[t], r + 1)
            times[t].append(seconds)
            rows[t].append(row)
    if rank == 0:
        with open(os.path.join(out_dir, f"{phase}.json"), "w") as f:
            json.dump({"times": times, "rows": rows}, f)
    peak = {"rank": rank, "peak_mem_mb": rows[tasks[0]][-1]["peak_mem_mb"]}
    with open(os.path.join(out_dir, f"{phase}_mem{rank}.json"), "w") as f:
        json.dump(peak, f)
    torch.distributed.barrier()
    dist.destroy_process_group()


def summarise(times: dict, rows: dict) -> dict:
    out = {}
    for task, values in times.items():
        out[task] = {
            "min_s": min(values),
            "median_s": statistics.median(values),
            "step_time_s_median": statistics.median(r["step_time_s"] for r in rows[task]),
            "comm_bytes": rows[task][-1]["comm_bytes"],
            "loss": rows[task][-1]["loss"],
        }
    out["ratio_min"] = out["link"]["min_s"] / out["node"]["min_s"]
    out["ratio_median"] = out["link"]["median_s"] / out["node"]["median_s"]
    return out


def main(argv=None) -> int:
    import torch.multiprocessing as mp

    from dsgraph.comm.ports import free_port
    from tools.common.bench import write_json

    args = parse_args(argv)
    report = {"args": vars(args)}
    with tempfile.TemporaryDirectory() as tmp:
        for phase in ("time", "node", "link"):
            mp.start_processes(
                _worker, args=(args.nprocs, free_port(), args, phase, tmp), nprocs=args.nprocs, start_method="spawn"
            )
            if phase == "time":
                timed = json.load(open(os.path.join(tmp, "time.json")))
                report["timing"] = summarise(timed["times"], timed["rows"])
                report["epochs_s"] = timed["times"]
            else:
                report[f"{phase}_peak_mem_mb"] = [
                    json.load(open(os.path.join(tmp, f"{phase}_mem{r}.json")))["peak_mem_mb"]
                    for r in range(args.nprocs)
                ]
    t = report["timing"]
    print("| task | step min / median (s) | trainer step_time_s (median) | comm MB per step | peak MB per rank |")
    print("| --- | --- | --- | --- | --- |")
    for task in ("node", "link"):
        s = t[task]
        mem = " / ".join(f"{m:,.0f}" for m in report[f"{task}_peak_mem_mb"])
        print(
            f"| {task} | {s['min_s']:.3f} / {s['median_s']:.3f} | {s['step_time_s_median']:.3f} "
            f"| {s['comm_bytes'] / 2**20:,.1f} | {mem} |"
        )
    print(f"link / node: {t['ratio_min']:.3f} (min), {t['ratio_median']:.3f} (median)")
    write_json(args.json_out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
