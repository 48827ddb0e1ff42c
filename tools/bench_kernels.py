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
"fwd % roofline" is the forward's model bytes over its time, as a share of --peak-gbs (the
no-reuse memory roofline: 4.3 TB/s on an H200).

Examples:
  python tools/bench_kernels.py --graph rmat:17 --heads 8 --dim 16 --dtype fp32 --threads 2
  python tools/bench_kernels.py --graph rmat:17 --graph my_graph.npz --device cuda --dtype bf16
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dsgraph.graph import load_dataset  # noqa: E402
from dsgraph.ops import available_backends, sparse_attention  # noqa: E402
from dsgraph.ops.peak_memory import cpu_peak_supported, peak_extra_bytes  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graph", action="append", help="rmat:SCALE[:EF], cora or a .npz file (repeatable; default rmat:17)")
    p.add_argument("--heads", type=int, default=8, help="attention heads H (default 8)")
    p.add_argument("--dim", type=int, default=16, help="head dim D (default 16)")
    p.add_argument("--dtype", action="append", choices=sorted(DTYPES), help="fp32 or bf16 (repeatable; default fp32)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (torch and numba; default: torch's)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per backend after one warm-up (default 3)")
    p.add_argument("--backends", default=None, help="comma list from reference,cpu,cuda,pyg (default: all that apply)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peak-gbs", type=float, default=None,
                   help="memory bandwidth for the forward roofline column, GB/s (default: 4300 on cuda, an H200; "
                   "the measured copy bandwidth on cpu)")
    return p.parse_args(argv)


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


def copy_bandwidth_gbs(device: torch.device, mbytes: int = 256) -> float:
    """Copy bandwidth (bytes read + written per second) of a large tensor copy."""
    src = torch.ones(mbytes * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    times = []
    for _ in range(5):
        _sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * src.numel() * 4 / min(times) / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_backend(run_fwd, q, k, v, dy, repeats: int) -> dict:
    """Median forward and backward seconds and the peak extra bytes of one forward+backward."""
    device = q.device

    def fwd_bwd():
        y = run_fwd(q, k, v)
        torch.autograd.backward(y, dy)
        return y

    fwd_bwd()  # warm-up: compilation, cached transposes and plans
    fwd_times, bwd_times = [], []
    for _ in range(repeats):
        q.grad = k.grad = v.grad = None
        _sync(device)
        t0 = time.perf_counter()
        y = run_fwd(q, k, v)
        _sync(device)
        t1 = time.perf_counter()
        torch.autograd.backward(y, dy)
        _sync(device)
        t2 = time.perf_counter()
        fwd_times.append(t1 - t0)
        bwd_times.append(t2 - t1)
        del y
    q.grad = k.grad = v.grad = None
    peak = None
    if device.type == "cuda" or cpu_peak_supported():
        _, peak = peak_extra_bytes(fwd_bwd, device)
        q.grad = k.grad = v.grad = None
    return {"fwd": statistics.median(fwd_times), "bwd": statistics.median(bwd_times), "peak": peak}


def bench_graph(g, spec: str, dtype_name: str, args: argparse.Namespace, device: torch.device) -> None:
    rowptr, col = g.rowptr.to(device), g.col.to(device)
    n, e = g.num_nodes, g.num_edges
    dtype = DTYPES[dtype_name]
    gen = torch.Generator().manual_seed(args.seed)
    q, k, v, dy = (torch.randn(n, args.heads, args.dim, generator=gen).to(device, dtype) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    dst = torch.repeat_interleave(torch.arange(n, device=device), rowptr[1:] - rowptr[:-1])

    runners = {"reference": lambda q, k, v: sparse_attention(rowptr, col, q, k, v, backend="reference")}
    fused = "cuda" if device.type == "cuda" else "cpu"
    if fused in available_backends():
        runners[fused] = lambda q, k, v: sparse_attention(rowptr, col, q, k, v, backend=fused)
    pyg = pyg_attention()
    if pyg is not None:
        runners["pyg"] = lambda q, k, v: pyg(rowptr, col, q, k, v, dst)
    if args.backends:
        wanted = args.backends.split(",")
        runners = {name: fn for name, fn in runners.items() if name in wanted or name == "reference"}

    results = {name: time_backend(fn, q, k, v, dy, args.repeats) for name, fn in runners.items()}
    peak_gbs = args.peak_gbs or (4300.0 if device.type == "cuda" else copy_bandwidth_gbs(device))
    fwd_bytes, bwd_bytes = model_bytes(n, e, args.heads, args.dim, torch.finfo(dtype).bits // 8)

    print(f"\n## {spec}: N={n:,} E={e:,} max in-degree={int((rowptr[1:] - rowptr[:-1]).max()):,} "
          f"H={args.heads} D={args.dim} {dtype_name} device={device} threads={torch.get_num_threads()}")  # fmt: skip
    ref = results["reference"]
    header = ("backend", "fwd ms", "bwd ms", "fwd+bwd ms", "speedup", "peak extra MB", "mem vs ref", "eff GB/s",
              "fwd % roofline")  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for name, r in results.items():
        total = r["fwd"] + r["bwd"]
        peak_mb = "n/a" if r["peak"] is None else f"{r['peak'] / 2**20:,.1f}"
        mem_ratio = "n/a" if r["peak"] is None or not ref["peak"] else f"{r['peak'] / ref['peak']:.1%}"
        row = (
            name, f"{r['fwd'] * 1e3:,.1f}", f"{r['bwd'] * 1e3:,.1f}", f"{total * 1e3:,.1f}",
            f"{(ref['fwd'] + ref['bwd']) / total:.1f}x", peak_mb, mem_ratio, f"{(fwd_bytes + bwd_bytes) / total / 1e9:.1f}",
            f"{fwd_bytes / r['fwd'] / 1e9 / peak_gbs:.1%}",
        )  # fmt: skip
        print("| " + " | ".join(row) + " |")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_kernels: --device cuda but torch sees no GPU")
    label = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"# sparse attention kernels on {label}; copy bandwidth {copy_bandwidth_gbs(device):.1f} GB/s (read + write)")
    print(f"# median of {args.repeats} runs after a warm-up; speedup and memory relative to 'reference' in this run")
    for spec in args.graph or ["rmat:17"]:
        graph = load_dataset(spec, seed=args.seed)
        for dtype_name in args.dtype or ["fp32"]:
            bench_graph(graph, spec, dtype_name, args, device)


if __name__ == "__main__":
    main()
