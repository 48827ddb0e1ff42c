"""What the AGP validation sweep runs on each rank: one Transformer layer (forward plus backward)
per (configuration, strategy), timed and its peak memory measured.

Per configuration the strategies' layers are built once, run once to warm up (JIT, cached
transposes, the gradients' buffers), then timed ``reps`` times in round-robin order, and then run
once more each for memory. A time sample is the slowest rank's time of a call that finds the heap
as the previous call left it (the ranks keep freed memory in the heap, ``dsgraph/agp/spawn.py``), as
a training step finds it. The memory sample hands the freed heap back first and allocates as glibc
does by default (tensors of 32 MiB and more mapped of their own), so it pays the page faults and is
not timed: its value is the largest rise of any rank's resident set during the call
above the resident set just before it (``PeakProbe``): the activations, gathered or received rows
and backward buffers of that layer, against a baseline that already holds the graph, the features,
the parameters and their gradients, which is how ``evaluate`` reads the model's prediction.
"""

from __future__ import annotations

import ctypes
import gc

import torch

from dsgraph.agp.measure import slowest_time
from dsgraph.agp.model import strategy_names

CLEAR_REFS = "/proc/self/clear_refs"


class PeakProbe:
    """Peak resident memory of this process during a call, above its resident memory before it:
    freed heap is handed back first (``malloc_trim``), VmHWM is reset by writing 5 to
    /proc/self/clear_refs and read from /proc/self/status after the call (Linux only)."""

    def __init__(self):
        try:
            with open(CLEAR_REFS, "w") as f:
                f.write("5")
        except OSError as err:
            raise RuntimeError(
                f"validate_agp measures peak memory by resetting VmHWM through {CLEAR_REFS}, which this "
                f"system refuses ({err}); it needs Linux 4.0 or newer"
            ) from None
        try:
            self._trim = ctypes.CDLL("libc.so.6").malloc_trim
        except OSError:  # not glibc: freed memory stays mapped and the baseline is higher
            self._trim = None

    @staticmethod
    def status_bytes(field: str) -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError(f"/proc/self/status has no {field}")

    def start(self) -> int:
        """Resets the high-water mark; returns the resident bytes it starts from."""
        gc.collect()
        if self._trim is not None:
            self._trim(0)
        base = self.status_bytes("VmRSS")
        with open(CLEAR_REFS, "w") as f:
            f.write("5")
        return base

    def peak(self) -> int:
        return self.status_bytes("VmHWM")


def _slowest(values: list[float]) -> list[float]:
    """Each value's maximum over the ranks."""
    import torch.distributed as dist

    out = torch.tensor(values, dtype=torch.float64)
    if dist.get_world_size() > 1:
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return out.tolist()


def _memory_sample(run, probe: PeakProbe) -> tuple[float, float]:
    """(largest peak rise of any rank, largest baseline of any rank), the call's tensors allocated as
    in a training run with glibc's default rule (``map_large``), not from the kept heap."""
    import torch.distributed as dist

    from dsgraph.runtime.host_memory import keep_heap, map_large

    base = probe.start()
    map_large()
    dist.barrier()
    try:
        run()
    finally:
        keep_heap()
    rise, base = _slowest([float(probe.peak() - base), float(base)])
    return rise, base


def graph_of(scale: int, edge_factor: int):
    """The configuration's R-MAT graph with self loops (what every strategy's layer runs on)."""
    from dsgraph.graph import load_dataset

    return load_dataset(f"rmat:{scale}:{edge_factor}", seed=0).with_self_loops()


def _cases(graph, cfg, p, backend):
    from dsgraph.comm import GraphParallelGroup
    from dsgraph.models.graph_transformer import TransformerBlock
    from dsgraph.modes.ranks import rank_attention
    from dsgraph.parallel import StrategyContext, get_strategy

    cases = []
    for name in strategy_names() if p > 1 else strategy_names()[:1]:
        if get_strategy(name).infeasible(cfg["heads"], p):
            continue
        ctx = StrategyContext(heads=cfg["heads"], backend=backend)
        _, rank_graph, attention = rank_attention(graph, GraphParallelGroup.from_world(), name, ctx)
        torch.manual_seed(0)
        block = TransformerBlock(cfg["hidden"], cfg["heads"], 2, dropout=0.1)
        h = torch.randn(rank_graph.nodes.num_rows, cfg["hidden"], requires_grad=True)
        ids = rank_graph.nodes.node_ids

        def run(block=block, attention=attention, h=h, ids=ids):
            block(h, attention, ids, 0, 1, 1).sum().backward()

        cases.append((name, run))
    return cases


def rank_sweep(rank, p, cfgs, reps, backend, log_prefix=""):
    """On each of p ranks: every configuration (a dict of scale, edge_factor, hidden, heads), every
    feasible strategy (GP-AG alone at p = 1). Returns {(i, strategy): (seconds, peak rise bytes,
    baseline bytes)}: the fastest of ``reps`` time samples and the memory sample."""
    import warnings

    from dsgraph.train.trainer import init_distributed

    warnings.filterwarnings("ignore")
    init_distributed(mpi_discovery=False)
    probe = PeakProbe()
    results, graph, graph_key = {}, None, None
    for i, cfg in enumerate(cfgs):
        key = (cfg["scale"], cfg["edge_factor"])
        if key != graph_key:
            graph, graph_key = None, key
            gc.collect()
            graph = graph_of(*key)
        cases = _cases(graph, cfg, p, backend)
        for _, run in cases:
            run()  # warm up
        best = {name: float("inf") for name, _ in cases}
        for _ in range(reps):
            for name, run in cases:
                best[name] = min(best[name], slowest_time(run, torch.device("cpu")))
        memory = {name: _memory_sample(run, probe) for name, run in cases}
        best = {name: (t, *memory[name]) for name, t in best.items()}
        for name, sample in best.items():
            results[(i, name)] = sample
        del cases
        if rank == 0:
            print(
                f"  {log_prefix}p={p} [{i + 1}/{len(cfgs)}] rmat{key[0]}x{key[1]} d{cfg['hidden']} H{cfg['heads']}: "
                + ", ".join(f"{n} {t * 1e3:.0f} ms {rise / 2**20:.0f} MiB" for n, (t, rise, _) in best.items()),
                flush=True,
            )
    return results
