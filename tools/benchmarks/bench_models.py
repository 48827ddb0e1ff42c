#!/usr/bin/env python
"""Step time and peak memory of dsgraph's default Graph Transformer beside a PyG TransformerConv
model of the same shape, on one device.

    python -m tools.benchmarks.bench_models --dataset rmat:22 --device cuda --dtype bf16 --json-out models.json
    python -m tools.benchmarks.bench_models --dataset rmat:8 --device cpu --steps 2     # a small check on the CPU

dsgraph: the training command itself (``python -m deepspeed.launcher.runner --num_gpus 1
launch/train.py`` with a config made from ds_configs/gpu_quickstart.json: hidden 128, 8 heads, 2
layers, FFN x2, dropout 0.1, no input or attention dropout, ZeRO-2, torch Adam, bf16 or fp32),
for STEPS + 2 epochs. Its step time is the median interval between rank 0's consecutive
"epoch N" lines (each line follows a loss that has reached the host, so the interval covers one
whole step; the first step, a warm-up, and the last, followed by an evaluation, are left out);
the trainer's own ``step_time_s`` (host clock around forward, backward and optimizer step) is
reported beside it. Peak memory is the metrics' ``peak_mem_mb``: torch's peak allocation in the
process on a GPU, peak resident set on the CPU.

PyG: in this process, the same blocks with ``torch_geometric.nn.TransformerConv`` as the attention
(pre-LayerNorm, TransformerConv -> Linear -> dropout -> residual, LayerNorm -> GELU FFN -> dropout
-> residual; final LayerNorm and classifier), the same edges (self loops added to rows without
one, as dsgraph does), torch Adam, the model cast to the dtype. One warm-up step, then STEPS timed
steps, each synchronised. Peak memory counts the whole process (graph, features, model and
activations), like dsgraph's. An out-of-memory error is a result ("oom": true), not a crash.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from dsgraph.models.options import TRANSFORMER
from tools.common.bench import device_label, is_out_of_memory, process_peak_bytes, release, sync, write_json
from tools.common.rss_watch import kill_group

ROOT = Path(__file__).resolve().parents[2]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
EPOCH_LINE = re.compile(r"^epoch\s+(\d+)\s+loss")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="rmat:22", help="cora | rmat:SCALE[:EF] | PATH.npz (default rmat:22)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--ffn-mult", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=4, help="timed steps per model after one warm-up (default 4)")
    p.add_argument("--models", default="dsgraph,pyg", help="comma list from dsgraph,pyg (default both)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for the dsgraph training run (default 300)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads of both models (default: torch's)")
    p.add_argument("--port", type=int, default=29680, help="master port of the dsgraph run")
    p.add_argument("--json-out", help="write the figures to this JSON file")
    return p.parse_args(argv)


# --- dsgraph, through the training command ---------------------------------------------------------
def dsgraph_config(args: argparse.Namespace, folder: Path) -> Path:
    config = json.loads((ROOT / "ds_configs/gpu_quickstart.json").read_text())
    config["bf16"] = {"enabled": args.dtype == "bf16"}
    config["tensorboard"] = {"enabled": False}
    config["optimizer"]["params"].update(lr=1e-3, weight_decay=0.0)
    config["dsgraph"].update(
        dataset=args.dataset,
        hidden=args.hidden,
        heads=args.heads,
        layers=args.layers,
        ffn_mult=args.ffn_mult,
        dropout=args.dropout,
        input_dropout=0.0,
        attention_dropout=0.0,
        checkpoint_dir=str(folder / "ckpt"),
        model=TRANSFORMER.to_dict(),
    )  # the shape of PyG's TransformerConv model
    path = folder / "bench_models.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def dsgraph_command(args: argparse.Namespace, config: Path, metrics: Path) -> list[str]:
    epochs = args.steps + 2
    launcher = [sys.executable, "-m", "deepspeed.launcher.runner", "--master_port", str(args.port)]
    launcher += ["--num_gpus", "1"] if args.device == "cuda" else ["--num_accelerators", "1"]
    return launcher + [
        str(ROOT / "launch/train.py"),
        "--deepspeed_config",
        str(config),
        "--epochs",
        str(epochs),
        "--eval-every",
        str(epochs),
        "--backend",
        args.device,
        "--seed",
        "0",
        "--metrics-out",
        str(metrics),
    ]


def line_intervals(stamped: list[tuple[float, str]]) -> list[float]:
    """Seconds between consecutive "epoch N" lines, leaving out the last line (an evaluation runs
    before it is printed). Interval k is the whole of step k + 1."""
    times = [t for t, line in stamped if EPOCH_LINE.match(line)]
    return [b - a for a, b in zip(times[:-2], times[1:-1])]


def _run_streamed(cmd: list[str], env: dict, timeout: float) -> tuple[int | None, list[tuple[float, str]]]:
    """Runs cmd (own process group), time-stamping each output line as it arrives; kills the group
    at the timeout (returncode None)."""
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,
    )
    timer = threading.Timer(timeout, kill_group, args=(proc.pid,))
    timer.start()
    stamped = [(time.monotonic(), line.rstrip("\n")) for line in proc.stdout]
    proc.wait()
    fired = not timer.is_alive() and proc.returncode == -signal.SIGKILL
    timer.cancel()
    return (None if fired else proc.returncode), stamped


def run_dsgraph(args: argparse.Namespace) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="dsgraph-bench-models-"))
    metrics = folder / "metrics.jsonl"
    cmd = dsgraph_command(args, dsgraph_config(args, folder), metrics)
    env = dict(os.environ, PYTHONUNBUFFERED="1", DS_ACCELERATOR="cuda" if args.device == "cuda" else "cpu")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), NUMBA_NUM_THREADS=str(args.threads))
    began = time.monotonic()
    rc, stamped = _run_streamed(cmd, env, args.timeout)
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.is_file() else []
    steps = [r for r in rows if r.get("kind") == "step"]
    result = {
        "command": " ".join(cmd),
        "returncode": rc,
        "seconds": time.monotonic() - began,
        "log_tail": "\n".join(line for _, line in stamped[-40:]),
    }
    intervals = line_intervals(stamped)
    if rc != 0 or len(steps) < args.steps + 2 or not intervals:
        return {**result, "status": "timeout" if rc is None else "failed"}
    return {
        **result,
        "status": "ok",
        "wall_step_s": statistics.median(intervals),
        "wall_steps_s": intervals,
        "trainer_step_time_s": statistics.median(r["step_time_s"] for r in steps[1:]),
        "peak_mem_mb": max(r["peak_mem_mb"] for r in steps),
        "losses": [r["loss"] for r in steps],
    }


# --- PyG TransformerConv, in this process ------------------------------------------------------
def pyg_model(in_dim: int, num_classes: int, args: argparse.Namespace) -> torch.nn.Module:
    """dsgraph's block structure with TransformerConv as the attention (same parameter shapes)."""
    from torch import nn
    from torch_geometric.nn import TransformerConv

    hidden, heads = args.hidden, args.heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm, self.ffn_norm = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.conv = TransformerConv(hidden, hidden // heads, heads=heads, root_weight=False)
            self.attn_out = nn.Linear(hidden, hidden)
            self.ffn = nn.Sequential(
                nn.Linear(hidden, args.ffn_mult * hidden), nn.GELU(), nn.Linear(args.ffn_mult * hidden, hidden)
            )
            self.drop = nn.Dropout(args.dropout)

        def forward(self, h, edge_index):
            h = h + self.drop(self.attn_out(self.conv(self.attn_norm(h), edge_index)))
            return h + self.drop(self.ffn(self.ffn_norm(h)))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.input = nn.Linear(in_dim, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.norm, self.classifier = nn.LayerNorm(hidden), nn.Linear(hidden, num_classes)

        def forward(self, x, edge_index):
            h = self.input(x)
            for block in self.blocks:
                h = block(h, edge_index)
            return self.classifier(self.norm(h))

    return Model()


def pyg_edges(graph) -> torch.Tensor:
    """edge_index [2, E'] (source, destination) with a self loop added to every row without one."""
    from torch_geometric.utils import add_remaining_self_loops

    dst = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.rowptr[1:] - graph.rowptr[:-1])
    edge_index, _ = add_remaining_self_loops(torch.stack([graph.col.long(), dst]), num_nodes=graph.num_nodes)
    return edge_index


def run_pyg(graph, args: argparse.Namespace) -> dict:
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    result = {"edges_with_self_loops": None}
    try:
        edge_index = pyg_edges(graph)
        result["edges_with_self_loops"] = int(edge_index.shape[1])
        return {**result, **_pyg_steps(graph, edge_index, args, device, dtype)}
    except (torch.OutOfMemoryError, RuntimeError) as err:
        if not is_out_of_memory(err):
            raise
        peak = process_peak_bytes(device) / 2**20
        release(device)
        return {
            **result,
            "status": "oom",
            "oom": True,
            "error": str(err).splitlines()[0][:300],
            "peak_mem_mb_before_oom": peak,
        }


def _pyg_steps(graph, edge_index, args, device, dtype) -> dict:
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = pyg_model(graph.num_features, graph.num_classes, args).to(device, dtype)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, edge_index = graph.x.to(device, dtype), edge_index.to(device)
    y, train = graph.y.to(device), graph.train_mask.to(device)
    times, losses = [], []
    for step in range(args.steps + 1):
        sync(device)
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x, edge_index)[train].float(), y[train])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))  # waits for the step, like dsgraph's loss logging
        sync(device)
        if step:  # step 0 is the warm-up
            times.append(time.perf_counter() - t0)
    return {
        "status": "ok",
        "oom": False,
        "wall_step_s": statistics.median(times),
        "wall_steps_s": times,
        "peak_mem_mb": process_peak_bytes(device) / 2**20,
        "losses": losses,
    }


def compare(ds: dict, pyg: dict) -> dict:
    """PyG over dsgraph for step time and peak memory (None where either did not finish)."""
    if ds.get("status") != "ok" or pyg.get("status") != "ok":
        return {"pyg_over_dsgraph_step_time": None, "pyg_over_dsgraph_peak_mem": None}
    return {
        "pyg_over_dsgraph_step_time": pyg["wall_step_s"] / ds["wall_step_s"],
        "pyg_over_dsgraph_peak_mem": pyg["peak_mem_mb"] / ds["peak_mem_mb"],
    }


def report(payload: dict) -> str:
    lines = [
        f"# {payload['dataset']}: N={payload['nodes']:,} E={payload['edges']:,} on {payload['device']}, "
        f"{payload['dtype']}, "
        f"hidden {payload['hidden']}, {payload['heads']} heads, {payload['layers']} layers",
        "| model | status | step ms (wall) | trainer step_time_s ms | peak MB |",
        "|---|---|---|---|---|",
    ]
    for name in ("dsgraph", "pyg"):
        r = payload.get(name)
        if r is None:
            continue
        ms = f"{r['wall_step_s'] * 1e3:,.1f}" if r.get("wall_step_s") else "-"
        trainer = f"{r['trainer_step_time_s'] * 1e3:,.1f}" if r.get("trainer_step_time_s") else "-"
        peak = r.get("peak_mem_mb") or r.get("peak_mem_mb_before_oom")
        status = r["status"] + (f": {r['error']}" if r.get("error") else "")
        lines.append(f"| {name} | {status} | {ms} | {trainer} | {'-' if peak is None else f'{peak:,.0f}'} |")
    ratio = payload.get("comparison", {})
    if ratio.get("pyg_over_dsgraph_step_time"):
        lines.append(
            f"PyG / dsgraph: step time {ratio['pyg_over_dsgraph_step_time']:.2f}x, peak memory "
            f"{ratio['pyg_over_dsgraph_peak_mem']:.2f}x"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_models: --device cuda but torch sees no GPU")
    if args.threads:
        torch.set_num_threads(args.threads)
    from dsgraph.graph import load_dataset

    models = args.models.split(",")
    label = Path(args.dataset).stem if args.dataset.endswith(".npz") else args.dataset
    payload = {
        "format": "dsgraph-bench-models",
        "dataset": label,
        "device": device_label(torch.device(args.device)),
        "dtype": args.dtype,
        "hidden": args.hidden,
        "heads": args.heads,
        "layers": args.layers,
        "steps": args.steps,
    }
    if "dsgraph" in models:  # first, while this process holds no device memory
        payload["dsgraph"] = run_dsgraph(args)
        write_json(args.json_out, {**payload, "nodes": None, "edges": None})
    graph = load_dataset(args.dataset, seed=0)
    payload.update(nodes=graph.num_nodes, edges=graph.num_edges)
    if "pyg" in models:
        payload["pyg"] = run_pyg(graph, args)
    if "dsgraph" in models and "pyg" in models:
        payload["comparison"] = compare(payload["dsgraph"], payload["pyg"])
    write_json(args.json_out, payload)
    print(report(payload))
    return 0 if all(payload[m]["status"] in ("ok", "oom") for m in models) else 1


if __name__ == "__main__":
    sys.exit(main())
