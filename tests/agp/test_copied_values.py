"""Each strategy's ``CostTerms.copied_values`` against the tensor operations its code runs: on every
rank of 1 to 4 gloo ranks (uneven parts, rows with no in-edges, a hub), a dispatch mode counts the
floating-point values that the attention's forward plus backward writes outside its collectives
(views and empty allocations write none); each strategy's ``copied_values`` of that rank's sizes
must give the count, and the model's term (``Strategy.cost`` on the graph's shape, the busiest rank)
the largest count of any rank."""

from __future__ import annotations

import traceback

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dsgraph.parallel import StrategyContext, a2a, ag, ag_ring, auto_candidates, get_strategy, halo
from dsgraph.parallel.config import ParallelConfig
from dsgraph.parallel.shapes import GraphShape, ModelShape
from dsgraph.parallel.spec import head_groups
from tests.distributed import run
from tests.graphs import random_graph

pytestmark = pytest.mark.slow  # every test here starts processes

HEAD_DIM = 16
WRITES_NOTHING = {"new_empty", "empty", "empty_like", "empty_strided", "_unsafe_view", "detach", "lift_fresh"}


class WrittenValues(TorchDispatchMode):
    """Floating-point values written by aten operations, those inside torch.distributed left out
    (a collective's own copies are its measured cost)."""

    def __init__(self):
        super().__init__()
        self.values = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace != "aten" or func.is_view or func.overloadpacket.__name__ in WRITES_NOTHING:
            return out
        if any("torch/distributed/" in frame.filename for frame in traceback.extract_stack()):
            return out
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                self.values += t.numel()
        return out


def _graph():
    return random_graph(num_nodes=1003, num_edges=8000, seed=3)


def _formula(name, rank_graph, pg, heads, hidden, chunks) -> float:
    """The strategy's ``copied_values`` of this rank's sizes."""
    p, rows = pg.world_size, rank_graph.nodes.num_rows
    if name == "ag":
        return ag.copied_values(rows, max(pg.counts), hidden, p, len(head_groups(heads, chunks)) if p > 1 else 1)
    if name == "a2a":
        groups = len(head_groups(heads // p, chunks)) if p > 1 else 1
        return a2a.copied_values(rows, hidden, heads, p, groups)
    if name == "ag_ring":
        return ag_ring.copied_values(rows, sum(pg.counts), hidden, heads, p)
    plan = rank_graph.derived[halo.PLAN]
    return halo.copied_values(rows, int(sum(plan.recv_counts)), int(sum(plan.send_counts)), hidden, p)


def _count_ranks(rank, world_size, tmp_path, heads, chunks):
    import torch.distributed as dist

    from dsgraph.comm import GraphParallelGroup
    from dsgraph.modes.ranks import rank_attention

    graph, hidden = _graph(), heads * HEAD_DIM
    counted = {}
    for name in auto_candidates():
        if get_strategy(name).infeasible(heads, world_size):
            continue
        ctx = StrategyContext(heads=heads, backend="cpu", parallel=ParallelConfig(comm_chunks=chunks))
        pg, rank_graph, attention = rank_attention(graph, GraphParallelGroup.from_world(), name, ctx)
        rows = rank_graph.nodes.num_rows
        q, k, v = (torch.randn(rows, heads, HEAD_DIM, requires_grad=True) for _ in range(3))
        dy = torch.randn(rows, heads, HEAD_DIM)
        torch.autograd.grad(attention(q, k, v), (q, k, v), dy)  # warm up: cached transposes, plans
        mode = WrittenValues()
        with mode:
            torch.autograd.grad(attention(q, k, v), (q, k, v), dy)
        expected = _formula(name, rank_graph, pg, heads, hidden, chunks)
        assert mode.values == pytest.approx(expected, rel=0.01), f"{name} rank {rank}: {mode.values} != {expected}"
        counted[name] = mode.values
    everyone = [None] * world_size
    dist.all_gather_object(everyone, counted)
    shape = GraphShape.from_graph(graph, [world_size])
    model = ModelShape(layers=1, hidden=hidden, heads=heads, parallel=ParallelConfig(comm_chunks=chunks))
    for name in counted:
        busiest = max(c[name] for c in everyone)
        terms = get_strategy(name).cost(world_size, shape, model.layer_kinds()[0].shape, 4)
        assert terms.copied_values == pytest.approx(busiest, rel=0.02), name


@pytest.mark.parametrize(
    "world_size, heads, chunks",
    [
        (1, 4, 1),
        (2, 8, 1),
        (3, 6, 1),  # three uneven parts
        (4, 4, 1),  # one head per rank: GP-A2A's node split is a view
        (2, 8, 2),  # head groups of two heads
        (2, 8, 4),  # head groups of one head
    ],
)
def test_strategies_copy_what_they_state(tmp_path, world_size, heads, chunks):
    run(_count_ranks, world_size, tmp_path, heads, chunks)
