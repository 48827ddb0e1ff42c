"""The measurements behind a profile: per rank count p, on p ranks running at once,

- attention: fused sparse attention forward plus backward on random graphs of growing edge count
  (time against edge-heads), at the profile's head dimension D and at 2D (their ratio gives the
  share of the per-(edge, head) cost that does not grow with D: ``head_dim_knee``);
- rest: one Transformer block with the attention replaced by a pass-through (projections, norms,
  FFN, dropout) forward plus backward, on growing node counts and three hidden sizes (time against
  node-MACs);
- collectives (p > 1): all-gather, reduce-scatter, all-to-all and an uneven all-to-all at message
  sizes 2^10 .. max_bytes (time against bytes per rank).

Every time is the minimum over ``reps`` round-robin repetitions of the slowest rank (a barrier
starts each one), which is what a synchronous step waits for. Each rank runs ``threads`` threads
(default 1: on a shared machine, several threads per rank stall whenever one is descheduled).
"""

from __future__ import annotations

import os
import platform
import socket
import time
from typing import Callable

import numpy as np
import torch

from dsgraph.agp.fits import fit_loglog
from dsgraph.agp.profile import COLLECTIVES, Profile, RankFits
from dsgraph.agp.spawn import run_ranks

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
ATTENTION_NODES = (128, 512, 2048, 8192)
ATTENTION_DEGREE = 16
MAX_KNEE = 64  # head_dim_knee is at most 64 * head_dim (cost nearly independent of D)
REST_SHAPES = ((128, 64), (512, 64), (512, 128), (2048, 128), (8192, 128), (2048, 64), (1024, 256))  # (nodes, hidden)


def _time_once(run: Callable[[], None]) -> float:
    """The slowest rank's time of one call of ``run`` (all ranks call it together after a barrier)."""
    import torch.distributed as dist

    dist.barrier()
    start = time.perf_counter()
    run()
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    if dist.get_world_size() > 1:
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed)


def interleaved_min(cases: list[tuple[str, float, Callable[[], None]]], reps: int) -> dict[str, list[tuple[float, float]]]:
    """Times every case ``(quantity, x, run)`` ``reps`` times in round-robin order (so a burst of
    load from other processes spoils one sample of many cases rather than every sample of one) and
    keeps the minimum. Returns quantity -> [(x, seconds), ...]."""
    for _, _, run in cases:
        run()  # warm up: JIT compilation, cached transposes, allocator
    best = [float("inf")] * len(cases)
    for _ in range(reps):
        for i, (_, _, run) in enumerate(cases):
            best[i] = min(best[i], _time_once(run))
    out: dict[str, list[tuple[float, float]]] = {}
    for (quantity, x, _), t in zip(cases, best):
        out.setdefault(quantity, []).append((x, t))
    return out


def random_csr(num_nodes: int, degree: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR of ``num_nodes`` rows with ``degree`` random in-edges each."""
    rng = np.random.default_rng(seed)
    col = torch.from_numpy(rng.integers(0, num_nodes, num_nodes * degree).astype(np.int32))
    rowptr = torch.arange(0, num_nodes * degree + 1, degree, dtype=torch.int64)
    return rowptr, col


def _attention_cases(rank, heads, head_dim, dtype, backend, quantity="attention") -> list:
    from dsgraph.ops import sparse_attention

    cases = []
    for n in ATTENTION_NODES:
        rowptr, col = random_csr(n, ATTENTION_DEGREE, seed=rank)
        q, k, v = (torch.randn(n, heads, head_dim, dtype=dtype, requires_grad=True) for _ in range(3))
        dy = torch.randn(n, heads, head_dim, dtype=dtype)

        def run(rowptr=rowptr, col=col, q=q, k=k, v=v, dy=dy):
            sparse_attention(rowptr, col, q, k, v, backend=backend).backward(dy)

        cases.append((quantity, float(col.numel() * heads), run))
    return cases


def _rest_cases(ffn_mult, dtype) -> list:
    """One block with a pass-through attention at several (nodes, hidden) sizes, so the node-MAC
    line covers the hidden sizes a plan may ask about."""
    from dsgraph.models.graph_transformer import TransformerBlock

    cases = []
    for n, hidden in REST_SHAPES:
        block = TransformerBlock(hidden, 4, ffn_mult, dropout=0.1).to(dtype)
        h = torch.randn(n, hidden, dtype=dtype, requires_grad=True)
        ids = torch.arange(n)

        def run(block=block, h=h, ids=ids):
            block(h, lambda q, k, v: v, ids, 0, 1, 1).sum().backward()

        cases.append(("rest", float(n * hidden * hidden * (4 + 2 * ffn_mult)), run))
    return cases


def message_sizes(max_bytes: int) -> list[int]:
    """2^10, 2^12, ... (powers of 4 times 2^10) up to max_bytes."""
    sizes, m = [], 2**10
    while m <= max_bytes:
        sizes.append(m)
        m *= 4
    return sizes


def _collective_cases(rank, p, max_bytes) -> list:
    import torch.distributed as dist

    cases = []
    for m in message_sizes(max_bytes):
        count = m // 4
        x, gathered = torch.randn(count), torch.empty(count * p)
        scattered, rs_in = torch.empty(count), torch.randn(count * p)
        a2a_in = torch.randn(max(count // p, 1) * p)
        a2a_out = torch.empty_like(a2a_in)
        # uneven splits: rank r sends shares ((d + r) % p + 1) / (p (p + 1) / 2) of count to rank d
        total_w = p * (p + 1) // 2
        all_send = [[count * ((d + r) % p + 1) // total_w for d in range(p)] for r in range(p)]
        send, recv = all_send[rank], [all_send[r][rank] for r in range(p)]
        u_in, u_out = torch.randn(sum(send)), torch.empty(sum(recv))
        cases += [
            ("all_gather", float(m), lambda x=x, g=gathered: dist.all_gather_into_tensor(g, x)),
            ("reduce_scatter", float(m), lambda o=scattered, i=rs_in: dist.reduce_scatter_tensor(o, i)),
            ("all_to_all", float(m), lambda o=a2a_out, i=a2a_in: dist.all_to_all_single(o, i)),
            ("all_to_all_uneven", float(m), lambda o=u_out, i=u_in, s=send, r=recv: dist.all_to_all_single(o, i, output_split_sizes=r, input_split_sizes=s)),
        ]
    return cases


def head_dim_knee(raw: dict, head_dim: int) -> float:
    """delta such that one (edge, head) costs in proportion to delta + D, from the attention times at
    D and 2D on the same graphs: their ratio r = (delta + 2D) / (delta + D). Per-(edge, head) work
    that does not grow with D (index loads, the softmax) makes delta > 0; 0 means all work is per D.
    Capped at MAX_KNEE * D (a ratio at or below 1: the cost does not grow with D at all)."""
    ratios = [t2 / t1 for (_, t1), (_, t2) in zip(raw["attention"], raw["attention_2d"])]
    r = float(np.exp(np.mean(np.log(ratios))))
    cap = MAX_KNEE * head_dim
    return min(cap, max(0.0, head_dim * (2.0 - r) / (r - 1.0))) if r > 1.0 else cap


def _measure_rank(rank, p, heads, head_dim, ffn_mult, dtype_name, backend, max_bytes, reps):
    import warnings

    warnings.filterwarnings("ignore", message=r".*is deprecated")
    dtype = DTYPES[dtype_name]
    torch.manual_seed(rank)
    cases = _attention_cases(rank, heads, head_dim, dtype, backend) + _rest_cases(ffn_mult, dtype)
    cases += _attention_cases(rank, heads, 2 * head_dim, dtype, backend, quantity="attention_2d")
    if p > 1:
        cases += _collective_cases(rank, p, max_bytes)
    return interleaved_min(cases, reps)


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux); 8 GiB when it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30


def system_description(backend: str, threads: int) -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "description": f"{socket.gethostname()}: {os.cpu_count()} x {cpu}, gloo over shared memory / loopback TCP",
        "hostname": socket.gethostname(),
        "device": "cpu",
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads_per_rank": threads,
        "torch": torch.__version__,
        "comm_backend": "gloo",
        "memory_capacity_bytes": total,
        "memory_shared_by_ranks": True,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def measure_profile(
    *,
    max_ranks: int,
    heads: int = 8,
    head_dim: int = 16,
    ffn_mult: int = 2,
    dtype: str = "float32",
    backend: str = "cpu",
    max_bytes: int | None = None,
    reps: int = 5,
    threads: int = 1,
    log: Callable[[str], None] = print,
) -> Profile:
    """Measures and fits a profile for rank counts 1..max_ranks on this machine."""
    if dtype not in DTYPES:
        raise ValueError(f"profile dtype must be one of {', '.join(DTYPES)}, got '{dtype}'")
    if max_ranks < 1:
        raise ValueError(f"--max-ranks must be >= 1, got {max_ranks}")
    from dsgraph.ops.dispatch import resolve_backend

    backend = resolve_backend(backend, torch.device("cpu"))
    if max_bytes is None:  # the largest power of 4 times 2^10 that p buffers of p * m bytes leave room for
        limit = min(2**22, available_memory_bytes() // (8 * max_ranks * max_ranks))
        max_bytes = max(m for m in message_sizes(2**28) if m <= max(limit, 2**10))
    ranks = {}
    for p in range(1, max_ranks + 1):
        began = time.perf_counter()
        raw = run_ranks(_measure_rank, p, heads, head_dim, ffn_mult, dtype, backend, max_bytes, reps, threads=threads)
        ranks[p] = RankFits(
            attention=fit_loglog(raw["attention"]),
            rest=fit_loglog(raw["rest"]),
            collectives={c: fit_loglog(raw[c]) for c in COLLECTIVES if c in raw},
            head_dim_knee=head_dim_knee(raw, head_dim),
        )
        log(f"profile: {p} rank(s) measured in {time.perf_counter() - began:.1f} s")
    system = system_description(backend, threads)
    system["max_message_bytes"] = max_bytes
    return Profile(backend, dtype, heads, head_dim, ffn_mult, system, ranks, source="<measured>")
