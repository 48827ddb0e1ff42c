#!/usr/bin/env python
"""Benchmark of the sparse attention backends: one table per graph.

For each backend (reference, cpu or cuda, and PyG's TransformerConv-style message passing when
torch_geometric is installed) it prints the median forward and backward time, the speedup over the
reference measured in the same run, the peak extra memory of one forward+backward (and its ratio
to the reference's), and the effective bandwidth. On the CPU it also measures the machine's copy
bandwidth, the ceiling to compare with.

Effective GB/s = model bytes / (forward + backward time), where model bytes is the traffic of an
ideal fused implementation that reads every gathered H x D row once per edge and every per-node
tensor once (b = bytes per element):
  forward   E * (4 + 2*H*D*b) + N * (2*H*D*b + 4*H)           (col; k, v per edge; q, y, lse)
  backward  2 * E * (4 + 2*H*D*b + 8*H) + N * (8*H*D*b + 12*H) (k, v per edge for dQ; q, dy, lse,
            delta per edge for dK, dV; q, dy, y, dq, dk, dv and lse, delta per node)
The same model bytes are used for every backend, so the column compares like with like.
"fwd % roofline" is the forward's model bytes over its time, as a share of the no-reuse memory
roofline: --peak-gbs, by default the copy bandwidth measured at the start of this run on this
device (about 4.3 TB/s on an H200; the best of 5 copies of 1 GiB). On a GPU every time is taken
with CUDA events (``Clock``), not the host clock around a synchronisation, whose latency would
lengthen a short copy or kernel and so misstate its bandwidth.

"vs ref" and "vs pyg" are fwd+bwd speedups over the reference and PyG-style backends of the same
run. The reference materialises several E x H x D tensors, so it never runs on graphs of
REFERENCE_MAX_EDGES (50M) edges or more (about 143 GiB at 60M edges, H*D = 128, bf16: more than an
H200 holds); there the comparison is with PyG-style message passing alone. A backend that runs
out of memory is a result ("out of memory" in the table, "oom": true in the JSON), not a crash.

Examples:
  python -m tools.benchmarks.bench_kernels --graph rmat:17 --heads 8 --dim 16 --dtype fp32 --threads 2
  python -m tools.benchmarks.bench_kernels --graph rmat:17 --graph my_graph.npz --device cuda --dtype bf16 \
      --json-out k.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from dsgraph.graph import load_dataset
from dsgraph.ops import available_backends, sparse_attention
from tools.common.bench import (
    cpu_peak_supported,
    device_label,
    is_out_of_memory,
    peak_extra_bytes,
    release,
    sync,
    write_json,
)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
BACKENDS = ("reference", "cpu", "cuda", "pyg")
REFERENCE_MAX_EDGES = 50_000_000


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--graph", action="append", help="rmat:SCALE[:EF], cora or a .npz file (repeatable; default rmat:17)"
    )
    p.add_argument("--heads", type=int, default=8, help="attention heads H (default 8)")
    p.add_argument("--dim", type=int, default=16, help="head dim D (default 16)")
    p.add_argument("--dtype", action="append", choices=sorted(DTYPES), help="fp32 or bf16 (repeatable; default fp32)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (torch and numba; default: torch's)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per backend after one warm-up (default 3)")
    p.add_argument(
        "--backends",
        default=None,
        help=f"comma list from {','.join(BACKENDS)} (default: all that apply; reference only below "
        f"{REFERENCE_MAX_EDGES:,} edges)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--peak-gbs",
        type=float,
        default=None,
        help="memory bandwidth for the forward roofline column, GB/s (default: the copy bandwidth "
        "measured at the start of the run on this device)",
    )
    p.add_argument("--json-out", help="also write every figure to this JSON file (rewritten after each table)")
    p.add_argument("--append", action="store_true", help="keep the records already in --json-out and add this run's")
    return p.parse_args(argv)


def graph_label(spec: str) -> str:
    """A dataset spec as it appears in tables: a file by its name without folder and suffix."""
    return Path(spec).stem if spec.endswith(".npz") else spec


def pyg_attention():
    """PyG's TransformerConv message passing (gather, edge softmax, scatter-sum), or None."""
    try:
        from torch_geometric.utils import scatter, softmax
    except ImportError:
        return None

    def attention(rowptr, col, q, k, v, dst):
        src = col.long()
        alpha_EH = (q[dst] * k[src]).sum(-1) * q.shape[-1] ** -0.5
        alpha_EH = softmax(alpha_EH, dst, num_nodes=q.shape[0])
        return scatter(v[src] * alpha_EH.unsqueeze(-1), dst, dim=0, dim_size=q.shape[0], reduce="sum")

    return attention


def model_bytes(n: int, e: int, heads: int, dim: int, elem: int) -> tuple[int, int]:
    hd = heads * dim * elem
    forward = e * (4 + 2 * hd) + n * (2 * hd + 4 * heads)
    backward = 2 * e * (4 + 2 * hd + 8 * heads) + n * (8 * hd + 12 * heads)
    return forward, backward


class Clock:
    """Seconds between two marks: CUDA events on a GPU (the host clock around a synchronisation adds
    the launch and synchronisation latency to every time), the host clock on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start, end) -> float:
        if not self.cuda:
            return end - start
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def copy_bandwidth_gbs(device: torch.device, mbytes: int | None = None) -> float:
    """Copy bandwidth (bytes read + written per second) of a large tensor copy, the best of 5 (1 GiB
    on a GPU, timed by CUDA events; 256 MiB on the CPU)."""
    mbytes = mbytes or (1024 if device.type == "cuda" else 256)
    src = torch.ones(mbytes * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    clock, times = Clock(device), []
    dst.copy_(src)  # warm-up: first touch of dst
    for _ in range(5):
        sync(device)
        t0 = clock.mark()
        dst.copy_(src)
        times.append(clock.seconds(t0, clock.mark()))
    return 2 * src.numel() * 4 / min(times) / 1e9


def backends_to_run(
    requested: str | None, device: torch.device, num_edges: int, have_pyg: bool
) -> tuple[list[str], list[str]]:
    """(backends to run, notes on the ones left out). The reference never runs at or above
    REFERENCE_MAX_EDGES edges; the fused backend is the device's own."""
    fused = "cuda" if device.type == "cuda" else "cpu"
    wanted = requested.split(",") if requested else ["reference", fused, "pyg"]
    unknown = sorted(set(wanted) - set(BACKENDS))
    if unknown:
        raise SystemExit(f"bench_kernels: unknown backend(s) {', '.join(unknown)}; choose from {', '.join(BACKENDS)}")
    run, notes = [], []
    for name in wanted:
        if name == "reference" and num_edges >= REFERENCE_MAX_EDGES:
            notes.append(
                f"reference left out: {num_edges:,} edges >= {REFERENCE_MAX_EDGES:,} (it materialises E x H x D "
                "tensors)"
            )
        elif name == "pyg" and not have_pyg:
            notes.append("pyg left out: torch_geometric is not installed")
        elif name in ("cpu", "cuda") and (name != fused or name not in available_backends()):
            notes.append(f"{name} left out: not available for device {device}")
        else:
            run.append(name)
    return run, notes


def time_backend(run_fwd, q, k, v, dy, repeats: int) -> dict:
    """Median forward and backward seconds and the peak extra bytes of one forward+backward; an
    out-of-memory error is returned as {"oom": True, "error": ...}."""
    try:
        return _time_backend(run_fwd, q, k, v, dy, repeats)
    except (torch.OutOfMemoryError, RuntimeError) as err:
        if not is_out_of_memory(err):
            raise
        q.grad = k.grad = v.grad = None
        release(q.device)
        return {"oom": True, "error": str(err).splitlines()[0][:300]}


def _time_backend(run_fwd, q, k, v, dy, repeats: int) -> dict:
    device = q.device

    def fwd_bwd():
        y = run_fwd(q, k, v)
        torch.autograd.backward(y, dy)
        return y

    fwd_bwd()  # warm-up: compilation, cached transposes and plans
    fwd_times, bwd_times, clock = [], [], Clock(device)
    for _ in range(repeats):
        q.grad = k.grad = v.grad = None
        sync(device)
        t0 = clock.mark()
        y = run_fwd(q, k, v)
        t1 = clock.mark()
        torch.autograd.backward(y, dy)
        t2 = clock.mark()
        sync(device)
        fwd_times.append(clock.seconds(t0, t1))
        bwd_times.append(clock.seconds(t1, t2))
        del y
    q.grad = k.grad = v.grad = None
    peak = None
    if device.type == "cuda" or cpu_peak_supported():
        _, peak = peak_extra_bytes(fwd_bwd, device)
        q.grad = k.grad = v.grad = None
    return {"oom": False, "fwd": statistics.median(fwd_times), "bwd": statistics.median(bwd_times), "peak": peak}


def make_inputs(g, args: argparse.Namespace, dtype: torch.dtype, device: torch.device):
    rowptr, col = g.rowptr.to(device), g.col.to(device)
    gen = torch.Generator().manual_seed(args.seed)
    q, k, v, dy = (torch.randn(g.num_nodes, args.heads, args.dim, generator=gen).to(device, dtype) for _ in range(4))
    return rowptr, col, [t.requires_grad_() for t in (q, k, v)], dy


def bench_graph(
    g, spec: str, dtype_name: str, args: argparse.Namespace, device: torch.device, peak_gbs: float
) -> list[dict]:
    """One record per backend (see ``record``) for graph ``g`` in one dtype."""
    pyg = pyg_attention()
    names, notes = backends_to_run(args.backends, device, g.num_edges, pyg is not None)
    rowptr, col, (q, k, v), dy = make_inputs(g, args, DTYPES[dtype_name], device)
    dst = (
        torch.repeat_interleave(torch.arange(g.num_nodes, device=device), rowptr[1:] - rowptr[:-1])
        if "pyg" in names
        else None
    )
    runners = {
        "reference": lambda q, k, v: sparse_attention(rowptr, col, q, k, v, backend="reference"),
        "cpu": lambda q, k, v: sparse_attention(rowptr, col, q, k, v, backend="cpu"),
        "cuda": lambda q, k, v: sparse_attention(rowptr, col, q, k, v, backend="cuda"),
        "pyg": lambda q, k, v: pyg(rowptr, col, q, k, v, dst),
    }
    results = {name: time_backend(runners[name], q, k, v, dy, args.repeats) for name in names}
    fwd_bytes, bwd_bytes = model_bytes(
        g.num_nodes, g.num_edges, args.heads, args.dim, torch.finfo(DTYPES[dtype_name]).bits // 8
    )
    info = {
        "graph": spec,
        "nodes": g.num_nodes,
        "edges": g.num_edges,
        "max_in_degree": int((rowptr[1:] - rowptr[:-1]).max()),
        "heads": args.heads,
        "dim": args.dim,
        "dtype": dtype_name,
        "device": device_label(device),
        "peak_gbs": peak_gbs,
        "model_bytes_fwd": fwd_bytes,
        "model_bytes_bwd": bwd_bytes,
        "notes": notes,
    }
    return [record(name, r, results, info) for name, r in results.items()]


def record(name: str, r: dict, results: dict, info: dict) -> dict:
    """The figures of one backend: times (ms), peak extra MB, effective GB/s, forward share of the
    roofline and fwd+bwd speedups over reference and pyg (None when either is missing or OOM)."""
    out = {**info, "backend": name, "oom": r["oom"], "error": r.get("error")}
    if r["oom"]:
        return out
    total = r["fwd"] + r["bwd"]

    def speedup(base):
        b = results.get(base)
        return None if b is None or b["oom"] else (b["fwd"] + b["bwd"]) / total

    return {
        **out,
        "fwd_ms": r["fwd"] * 1e3,
        "bwd_ms": r["bwd"] * 1e3,
        "fwd_bwd_ms": total * 1e3,
        "peak_extra_mb": None if r["peak"] is None else r["peak"] / 2**20,
        "eff_gbs": (info["model_bytes_fwd"] + info["model_bytes_bwd"]) / total / 1e9,
        "fwd_roofline": info["model_bytes_fwd"] / r["fwd"] / 1e9 / info["peak_gbs"],
        "speedup_vs_reference": speedup("reference"),
        "speedup_vs_pyg": speedup("pyg"),
    }


def table(records: list[dict]) -> str:
    first = records[0]
    lines = [
        f"\n## {first['graph']}: N={first['nodes']:,} E={first['edges']:,} max in-degree={first['max_in_degree']:,} "
        f"H={first['heads']} D={first['dim']} {first['dtype']} device={first['device']} "
        f"threads={torch.get_num_threads()}"
    ]
    lines += [f"# {note}" for note in first["notes"]]
    header = (
        "backend",
        "fwd ms",
        "bwd ms",
        "fwd+bwd ms",
        "vs ref",
        "vs pyg",
        "peak extra MB",
        "eff GB/s",
        "fwd % roofline",
    )
    lines += ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in records:
        if r["oom"]:
            lines.append(f"| {r['backend']} | out of memory | | | | | | | |")
            continue

        def x(v, fmt, unit=""):
            return "n/a" if v is None else format(v, fmt) + unit

        row = (
            r["backend"],
            f"{r['fwd_ms']:,.1f}",
            f"{r['bwd_ms']:,.1f}",
            f"{r['fwd_bwd_ms']:,.1f}",
            x(r["speedup_vs_reference"], ".1f", "x"),
            x(r["speedup_vs_pyg"], ".1f", "x"),
            x(r["peak_extra_mb"], ",.1f"),
            f"{r['eff_gbs']:.1f}",
            f"{r['fwd_roofline']:.1%}",
        )
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_kernels: --device cuda but torch sees no GPU")
    copy_gbs = copy_bandwidth_gbs(device)
    peak_gbs = args.peak_gbs or copy_gbs
    print(
        f"# sparse attention kernels on {device_label(device)}; copy bandwidth {copy_gbs:.1f} GB/s (read + write); "
        f"roofline at {peak_gbs:.1f} GB/s"
    )
    print(f"# median of {args.repeats} runs after a warm-up; speedups over 'reference' and 'pyg' in this run")
    payload = {
        "format": "dsgraph-bench-kernels",
        "device": device_label(device),
        "copy_gbs": copy_gbs,
        "peak_gbs": peak_gbs,
        "records": [],
    }
    if args.append and args.json_out and Path(args.json_out).is_file():
        payload["records"] = json.loads(Path(args.json_out).read_text()).get("records", [])
    for spec in args.graph or ["rmat:17"]:
        graph = load_dataset(spec, seed=args.seed)
        for dtype_name in args.dtype or ["fp32"]:
            records = bench_graph(graph, graph_label(spec), dtype_name, args, device, peak_gbs)
            print(table(records), flush=True)
            payload["records"] += records
            write_json(args.json_out, payload)


if __name__ == "__main__":
    main()
