"""The measurements behind a profile: per rank count p, on p ranks running at once,

- attention: fused sparse attention forward plus backward on random graphs of growing edge count,
  of a second in-degree and head count at the largest sizes, and of one size whose in-edges come
  from 1/16 to 16 times as many rows (``AttentionFit``: time against edges, edge-heads, row-heads and
  source row-heads, the K/V reads' cache, and one fixed cost per call), at the profile's head
  dimension D, and at 2D (their ratio gives the share of the per-(edge, head) cost that does not
  grow with D: ``head_dim_knee``);
- rest: one Transformer block, the layer's real code (projections, norms, FFN, GELU, dropout,
  residual sums) with the attention kernel replaced by a stand-in that costs nothing and passes
  gradients to q, k and v as the kernel does (``AttentionStandIn``), forward plus backward, on
  growing node counts and three hidden sizes (``RestFit``: time against node-MACs n d^2 (4 + 2 f),
  node-values n d and one fixed cost per block);
- copy: rows copied into another layout (a transpose made contiguous, as strategies lay rows out to
  send them and back), at growing sizes (``LatencyBandwidthFit``: time against values written): the
  price per value of a strategy's own tensor work around its kernels (``CostTerms.copied_values``);
- collectives (p > 1): all-gather, reduce-scatter, all-to-all and an uneven all-to-all at message
  sizes 2^10 .. max_bytes (time against bytes per rank, fitted as latency plus bandwidth).

Every time is the minimum over ``reps`` round-robin repetitions of the slowest rank (a barrier
starts each one), which is what a synchronous step waits for. Each rank runs ``threads`` threads
(default 1: on a shared machine, several threads per rank stall whenever one is descheduled).

With the ``cuda`` backend every rank owns one GPU (rank r uses cuda:r), collectives run on NCCL,
the sizes grow to what a GPU needs to leave launch latency behind (``CUDA_SIZES``), and each time
is taken with CUDA events after a device synchronisation (``timed``), never from a bare host clock
around asynchronous launches. Rank counts beyond the GPUs present can take their collective fits
from another profile (``dsgraph.agp.profile.with_collectives_from``).
"""

from __future__ import annotations

import os
import platform
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from dsgraph.agp.fits import fit_attention, fit_latency_bandwidth, fit_rest
from dsgraph.agp.profile import COLLECTIVES, Profile, RankFits
from dsgraph.agp.spawn import run_ranks
from dsgraph.ops.dispatch import resolve_backend
from dsgraph.runtime.host_memory import available_memory_bytes

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
ATTENTION_DEGREE = 16
SHAPE_DEGREE, SHAPE_HEADS_DIVISOR, SHAPE_SIZES = 4, 4, 3  # the attention fit's other graphs (_attention_cases)
MAX_KNEE = 64  # head_dim_knee is at most 64 * head_dim (cost nearly independent of D)


@dataclass(frozen=True, slots=True)
class Sizes:
    """The problem sizes of one device type."""

    attention_nodes: tuple[int, ...]
    """Rows of the random attention graphs (ATTENTION_DEGREE in-edges each)."""
    source_case: tuple[int, tuple[int, ...]]
    """(rows, source rows ...) of the graphs whose in-edges come from more or fewer rows than they
    have (ATTENTION_DEGREE each): the K/V a call reads outgrowing the cache."""
    rest_shapes: tuple[tuple[int, int], ...]
    """(nodes, hidden) of the pass-through Transformer blocks."""
    max_message_bytes: int
    """Largest collective message by default (memory permitting)."""
    copy_values: tuple[int, ...]
    """Values written by the copy cases."""


CPU_SIZES = Sizes(  # up to 2M edges and 262k-node blocks: the graphs full-graph training runs (rmat:16-18)
    attention_nodes=(128, 512, 2048, 8192, 32768, 131072),
    source_case=(16384, (2**10, 2**12, 2**14, 2**16, 2**18)),  # 1 MiB .. 256 MiB of fp32 K and V at H 8, D 16
    rest_shapes=(
        (128, 64),
        (512, 64),
        (512, 128),
        (2048, 128),
        (8192, 128),
        (2048, 64),
        (1024, 256),
        (32768, 128),
        (131072, 64),
        (65536, 128),
        (262144, 64),
    ),
    max_message_bytes=2**22,
    copy_values=(2**16, 2**18, 2**20, 2**22, 2**24),  # 256 KiB .. 64 MiB of fp32
)
CUDA_SIZES = Sizes(  # up to 16M edges and 1M-node blocks: past launch latency, into the bandwidth regime
    attention_nodes=(2**12, 2**14, 2**16, 2**18, 2**20),
    source_case=(2**16, (2**12, 2**15, 2**18, 2**21)),  # 4 MiB .. 2 GiB of fp32 K and V at H 8, D 16
    rest_shapes=((2**12, 64), (2**14, 128), (2**16, 128), (2**18, 128), (2**20, 128), (2**16, 256), (2**18, 64)),
    max_message_bytes=2**26,
    copy_values=(2**20, 2**22, 2**24, 2**26, 2**28),  # 4 MiB .. 1 GiB of fp32
)


def sizes_for(device: torch.device) -> Sizes:
    return CUDA_SIZES if device.type == "cuda" else CPU_SIZES


def timed(run: Callable[[], None], device: torch.device) -> float:
    """Seconds of one call of ``run`` on ``device``: on a GPU, CUDA events on the current stream
    after draining earlier work (kernels launch asynchronously, so a host clock around the call
    would time the launches); on the CPU, the host clock."""
    if device.type != "cuda":
        start = time.perf_counter()
        run()
        return time.perf_counter() - start
    torch.cuda.synchronize(device)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    run()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3


def slowest_time(run: Callable[[], None], device: torch.device) -> float:
    """The slowest rank's time of one call of ``run`` (all ranks call it together after a barrier)."""
    import torch.distributed as dist

    dist.barrier()
    seconds = timed(run, device)
    if dist.get_world_size() == 1:
        return seconds
    elapsed = torch.tensor([seconds], dtype=torch.float64, device=device)  # NCCL reduces device tensors only
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed)


def interleaved_min(
    cases: list[tuple[str, float | tuple, Callable[[], None]]], reps: int, device: torch.device = torch.device("cpu")
) -> dict[str, list[tuple[float | tuple, float]]]:
    """Times every case ``(quantity, x, run)`` (x a size, or a tuple of sizes) ``reps`` times in
    round-robin order (so a burst of load from other processes spoils one sample of many cases
    rather than every sample of one) and keeps the minimum. Returns quantity -> [(x, seconds), ...]."""
    for _, _, run in cases:
        run()  # warm up: JIT compilation, cached transposes, allocator
    best = [float("inf")] * len(cases)
    for _ in range(reps):
        for i, (_, _, run) in enumerate(cases):
            best[i] = min(best[i], slowest_time(run, device))
    out: dict[str, list[tuple[float, float]]] = {}
    for (quantity, x, _), t in zip(cases, best):
        out.setdefault(quantity, []).append((x, t))
    return out


def random_csr(num_nodes: int, degree: int, seed: int, sources: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR of ``num_nodes`` rows with ``degree`` random in-edges each, from ``sources`` rows
    (default: the same rows)."""
    rng = np.random.default_rng(seed)
    col = torch.from_numpy(rng.integers(0, sources or num_nodes, num_nodes * degree).astype(np.int32))
    rowptr = torch.arange(0, num_nodes * degree + 1, degree, dtype=torch.int64)
    return rowptr, col


def _attention_cases(rank, heads, head_dim, dtype, backend, device, quantity="attention") -> list:
    """The kernel forward plus backward on random graphs: every size of ``attention_nodes`` at
    ATTENTION_DEGREE in-edges and ``heads`` heads, and (``quantity`` "attention") the largest sizes
    again at SHAPE_DEGREE and at ``heads // SHAPE_HEADS_DIVISOR``, and (``quantity`` "attention")
    ``source_case``'s rows with in-edges from fewer and more rows, so the fit separates the cost per
    edge, per edge-head, per row-head and per source row-head, and finds the cache. The case's x is
    (edges, edge-heads, row-heads, source row-heads)."""
    sizes = sizes_for(device).attention_nodes
    shapes = [(n, ATTENTION_DEGREE, heads, n) for n in sizes]
    if quantity == "attention":
        few_heads = max(1, heads // SHAPE_HEADS_DIVISOR)
        shapes += [(n, SHAPE_DEGREE, heads, n) for n in sizes[-SHAPE_SIZES:]]
        shapes += [(n, ATTENTION_DEGREE, few_heads, n) for n in sizes[-SHAPE_SIZES:] if few_heads != heads]
        n, sources = sizes_for(device).source_case
        shapes += [(n, ATTENTION_DEGREE, heads, s) for s in sources]
    return [_attention_case(rank, *shape, head_dim, dtype, backend, device, quantity) for shape in shapes]


def _attention_case(rank, n, degree, heads, sources, head_dim, dtype, backend, device, quantity):
    """The kernel over ``n`` rows of ``degree`` in-edges from ``sources`` rows. The case's x is
    (edges, edge-heads, row-heads, source row-heads)."""
    from dsgraph.ops import sparse_attention

    rowptr, col = (t.to(device) for t in random_csr(n, degree, seed=rank, sources=sources))
    q = torch.randn(n, heads, head_dim, dtype=dtype, device=device, requires_grad=True)
    k, v = (torch.randn(sources, heads, head_dim, dtype=dtype, device=device, requires_grad=True) for _ in range(2))
    dy = torch.randn(n, heads, head_dim, dtype=dtype, device=device)

    def run(rowptr=rowptr, col=col, q=q, k=k, v=v, dy=dy):  # the gradients are returned, not accumulated
        torch.autograd.grad(sparse_attention(rowptr, col, q, k, v, backend=backend), (q, k, v), dy)

    edges = float(col.numel())
    return (quantity, (edges, edges * heads, float(n * heads), float(sources * heads)), run)


class AttentionStandIn(torch.autograd.Function):
    """What the rest block runs in place of the attention kernel: y = v (a view, no work) forward,
    and the output's gradient as the gradient of q, k and v backward, so that the q and k
    projections' backward runs as in the real layer (a plain pass-through ``lambda q, k, v: v``
    leaves q and k out of the graph: two of the block's eight weight products lose their backward).
    The kernel's own work, its output and its gradients' buffers, are the attention fit's."""

    @staticmethod
    def forward(ctx, q, k, v):
        return v.view_as(v)

    @staticmethod
    def backward(ctx, dy):
        return dy, dy, dy


def _rest_cases(ffn_mult, dtype, device) -> list:
    """One block with the attention stand-in at several (nodes, hidden) sizes, so the fit separates
    the work per node-MAC from the work per node-value and covers the hidden sizes a plan may ask
    about. The case's x is (node-MACs, node-values)."""
    from dsgraph.models.graph_transformer import TransformerBlock

    cases = []
    for n, hidden in sizes_for(device).rest_shapes:
        block = TransformerBlock(hidden, 4, ffn_mult, dropout=0.1).to(device, dtype)
        h = torch.randn(n, hidden, dtype=dtype, device=device, requires_grad=True)
        ids = torch.arange(n, device=device)

        def run(block=block, h=h, ids=ids):
            block(h, AttentionStandIn.apply, ids, 0, 1, 1).sum().backward()

        cases.append(("rest", (float(n * hidden * hidden * (4 + 2 * ffn_mult)), float(n * hidden)), run))
    return cases


COPY_WIDTH = 64  # values per row that move together (H/P heads of D = 16 at H 8, P 2)


def _copy_cases(dtype, device) -> list:
    """Rows of ``COPY_WIDTH`` values in two halves put into the other order ([n, 2, w] -> [2, n, w],
    the layout change of rows sent to two ranks) at ``copy_values`` sizes, into a buffer allocated
    once: a training step's copies find their memory in the allocator's cache (a fresh 64 MiB
    tensor would time the page faults of its first touch). The case's x is the values written."""
    cases = []
    for values in sizes_for(device).copy_values:
        x = torch.randn(values // (2 * COPY_WIDTH), 2, COPY_WIDTH, dtype=dtype, device=device)
        out = torch.empty(2, values // (2 * COPY_WIDTH), COPY_WIDTH, dtype=dtype, device=device)
        cases.append(("copy", float(values), lambda x=x, out=out: out.copy_(x.transpose(0, 1))))
    return cases


def message_sizes(max_bytes: int) -> list[int]:
    """2^10, 2^12, ... (powers of 4 times 2^10) up to max_bytes."""
    sizes, m = [], 2**10
    while m <= max_bytes:
        sizes.append(m)
        m *= 4
    return sizes


def _collective_cases(rank, p, max_bytes, device) -> list:
    import torch.distributed as dist

    def randn(count):
        return torch.randn(count, device=device)

    cases = []
    for m in message_sizes(max_bytes):
        count = m // 4
        x, gathered = randn(count), torch.empty(count * p, device=device)
        scattered, rs_in = torch.empty(count, device=device), randn(count * p)
        a2a_in = randn(max(count // p, 1) * p)
        a2a_out = torch.empty_like(a2a_in)
        # uneven splits: rank r sends shares ((d + r) % p + 1) / (p (p + 1) / 2) of count to rank d
        total_w = p * (p + 1) // 2
        all_send = [[count * ((d + r) % p + 1) // total_w for d in range(p)] for r in range(p)]
        send, recv = all_send[rank], [all_send[r][rank] for r in range(p)]
        u_in, u_out = randn(sum(send)), torch.empty(sum(recv), device=device)
        cases += [
            ("all_gather", float(m), lambda x=x, g=gathered: dist.all_gather_into_tensor(g, x)),
            ("reduce_scatter", float(m), lambda o=scattered, i=rs_in: dist.reduce_scatter_tensor(o, i)),
            ("all_to_all", float(m), lambda o=a2a_out, i=a2a_in: dist.all_to_all_single(o, i)),
            (
                "all_to_all_uneven",
                float(m),
                lambda o=u_out, i=u_in, s=send, r=recv: dist.all_to_all_single(
                    o, i, output_split_sizes=r, input_split_sizes=s
                ),
            ),
        ]
    return cases


def head_dim_knee(raw: dict, head_dim: int) -> float:
    """delta such that one (edge, head) costs in proportion to delta + D, from the attention times at
    D and 2D on the same graphs: their ratio r = (delta + 2D) / (delta + D). Per-(edge, head) work
    that does not grow with D (index loads, the softmax) makes delta > 0; 0 means all work is per D.
    Capped at MAX_KNEE * D (a ratio at or below 1: the cost does not grow with D at all)."""
    ratios = [t2 / t1 for (_, t1), (_, t2) in zip(raw["attention"], raw["attention_2d"])]  # the same graphs first
    r = float(np.exp(np.mean(np.log(ratios))))
    cap = MAX_KNEE * head_dim
    return min(cap, max(0.0, head_dim * (2.0 - r) / (r - 1.0))) if r > 1.0 else cap


def rank_device(rank: int, backend: str) -> torch.device:
    """The device rank ``rank`` measures on: its own GPU for the cuda backend, else the CPU."""
    return torch.device("cuda", rank) if backend == "cuda" else torch.device("cpu")


def _measure_rank(rank, p, heads, head_dim, ffn_mult, dtype_name, backend, max_bytes, reps):
    import warnings

    warnings.filterwarnings("ignore", message=r".*is deprecated")
    dtype, device = DTYPES[dtype_name], rank_device(rank, backend)
    torch.manual_seed(rank)
    cases = _attention_cases(rank, heads, head_dim, dtype, backend, device) + _rest_cases(ffn_mult, dtype, device)
    cases += _copy_cases(dtype, device)
    cases += _attention_cases(rank, heads, 2 * head_dim, dtype, backend, device, quantity="attention_2d")
    if p > 1:
        cases += _collective_cases(rank, p, max_bytes, device)
    return interleaved_min(cases, reps, device)


def _cpu_name() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return cpu


def system_description(backend: str, threads: int) -> dict:
    """What was measured on: the CPU and gloo, or (backend cuda) the GPUs and NCCL."""
    cpu, host = _cpu_name(), socket.gethostname()
    common = {
        "hostname": host,
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads_per_rank": threads,
        "torch": torch.__version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if backend != "cuda":
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return {
            "description": f"{host}: {os.cpu_count()} x {cpu}, gloo over shared memory / loopback TCP",
            "device": "cpu",
            **common,
            "comm_backend": "gloo",
            "memory_capacity_bytes": total,
            "memory_shared_by_ranks": True,
        }
    props = torch.cuda.get_device_properties(0)
    gpus = torch.cuda.device_count()
    return {
        "description": f"{host}: {gpus} x {props.name} ({props.total_memory / 2**30:.0f} GiB), NCCL",
        "device": "cuda",
        "gpu": props.name,
        "gpus": gpus,
        **common,
        "cuda": torch.version.cuda,
        "comm_backend": "nccl",
        "memory_capacity_bytes": props.total_memory,
        "memory_shared_by_ranks": False,
    }


def check_cuda_profile(backend: str, head_dim: int) -> int:
    """The number of GPUs for a cuda profile; ValueError when there is none or the CUDA backend
    refuses head dim 2D (the profile times D and 2D for head_dim_knee)."""
    from dsgraph.ops import available_backends, sparse_attention

    if not torch.cuda.is_available() or "cuda" not in available_backends():
        raise ValueError(
            f"--backend {backend} needs a CUDA GPU and CuPy (pip install -e '.[cuda]'), but this machine has "
            f"none (torch.cuda.is_available() is {torch.cuda.is_available()}); run `dsgraph profile --backend cuda` "
            "on the GPU machine, or profile the CPU with --backend cpu"
        )
    for dim in (head_dim, 2 * head_dim):  # one edge on the GPU: the backend's own check of the head dim
        rowptr = torch.tensor([0, 1], device="cuda")
        q = torch.zeros(1, 1, dim, device="cuda")
        try:
            sparse_attention(rowptr, torch.zeros(1, dtype=torch.int32, device="cuda"), q, q, q, backend="cuda")
        except ValueError as err:
            raise ValueError(
                f"--head-dim {head_dim}: the profile times head dims {head_dim} and {2 * head_dim} (for "
                "head_dim_knee), "
                f"and the CUDA backend refuses {dim} ({err}); pick a head dim whose double it supports, e.g. 16"
            ) from None
    return torch.cuda.device_count()


def measurable_ranks(backend: str, max_ranks: int, head_dim: int) -> int:
    """How many rank counts this machine can measure: every one on the CPU, one per GPU on cuda."""
    if max_ranks < 1:
        raise ValueError(f"--max-ranks must be >= 1, got {max_ranks}")
    if backend != "cuda":
        return max_ranks
    return min(max_ranks, check_cuda_profile(backend, head_dim))


def default_max_bytes(backend: str, ranks: int) -> int:
    """The largest power of 4 times 2^10 that p buffers of p * m bytes leave room for."""
    device = torch.device("cuda" if backend == "cuda" else "cpu")
    free = torch.cuda.mem_get_info(0)[0] if backend == "cuda" else available_memory_bytes()
    limit = min(sizes_for(device).max_message_bytes, free // (8 * ranks * ranks))
    return max(m for m in message_sizes(2**28) if m <= max(limit, 2**10))


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
    """Measures and fits a profile for rank counts 1..max_ranks on this machine (on cuda: at most
    one rank per GPU; rank counts beyond are left to ``with_collectives_from``)."""
    if dtype not in DTYPES:
        raise ValueError(f"profile dtype must be one of {', '.join(DTYPES)}, got '{dtype}'")
    ranks_here = measurable_ranks(backend, max_ranks, head_dim)
    backend = resolve_backend(backend, torch.device("cpu")) if backend != "cuda" else backend
    max_bytes = max_bytes or default_max_bytes(backend, ranks_here)
    comm = "nccl" if backend == "cuda" else "gloo"
    ranks = {}
    for p in range(1, ranks_here + 1):
        began = time.perf_counter()
        raw = run_ranks(
            _measure_rank, p, heads, head_dim, ffn_mult, dtype, backend, max_bytes, reps, threads=threads, comm=comm
        )
        ranks[p] = RankFits(
            attention=fit_attention([(*x, t) for x, t in raw["attention"]]),
            rest=fit_rest([(*x, t) for x, t in raw["rest"]]),
            collectives={c: fit_latency_bandwidth(raw[c]) for c in COLLECTIVES if c in raw},
            head_dim_knee=head_dim_knee(raw, head_dim),
            copy=fit_latency_bandwidth(raw["copy"]),
        )
        log(f"profile: {p} rank(s) measured in {time.perf_counter() - began:.1f} s on {comm}")
    system = system_description(backend, threads)
    system.update(max_message_bytes=max_bytes, ranks_measured=sorted(ranks))
    return Profile(backend, dtype, heads, head_dim, ffn_mult, system, ranks, source="<measured>")
