"""GP-A2A's edge values: every rank runs its heads over the whole graph, so it keeps the whole
graph's u [E, C], gathered once. Later calls reuse it only while every rank's u is unchanged: a u
changed on all ranks, or on one rank only, is gathered again, and y and z equal the 1-process op's
on the whole graph each time. (Outputs and gradients of whole models on 2 and 4 ranks, for every
strategy: test_conformance.py.)"""

import pytest
import torch

import dsgraph.parallel.a2a as a2a
from dsgraph.comm import GraphParallelGroup, RowSplit
from dsgraph.modes.ranks import rank_attention
from dsgraph.ops import sparse_attention
from dsgraph.parallel import StrategyContext
from tests.distributed import run
from tests.graphs import random_graph

pytestmark = pytest.mark.slow  # every test here starts processes

HEADS, DIM, CHANNELS = 4, 8, 3


def _kept_values_are_gathered_again_when_any_rank_changes_them(rank, world, tmp):
    graph = random_graph()
    pg = GraphParallelGroup.from_world().with_split(RowSplit((40, 63)))
    pg, rank_graph, attention = rank_attention(graph, pg, "a2a", StrategyContext(heads=HEADS, backend="cpu"))
    gathers = []
    gather = a2a.gather_constant_rows
    a2a.gather_constant_rows = lambda *args: gathers.append(1) or gather(*args)
    gen = torch.Generator().manual_seed(0)
    n, e = graph.num_nodes, graph.num_edges
    q, k, v = (torch.randn(n, HEADS, DIM, generator=gen) for _ in range(3))
    bias = torch.randn(e, HEADS, generator=gen)
    start, end = pg.rows
    first, last = int(graph.rowptr[start]), int(graph.rowptr[end])
    u_first = torch.randn(e, CHANNELS, generator=gen)
    u_all_changed = torch.randn(e, CHANNELS, generator=gen)
    u_one_changed = u_all_changed.clone()
    u_one_changed[last - 1 if rank == 1 else 0] += 1.0  # on rank 1's edges only: rank 0's u is unchanged
    for u, gathered in ((u_first, 1), (u_first.clone(), 0), (u_all_changed, 1), (u_one_changed, 1), (u_one_changed, 0)):
        y, z = attention(q[start:end], k[start:end], v[start:end], bias[first:last], u[first:last].clone())
        y_want, z_want = sparse_attention(graph.rowptr, graph.col, q, k, v, bias=bias, edge_values=u, backend="cpu")
        torch.testing.assert_close(y, y_want[start:end], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(z, z_want[start:end], rtol=1e-5, atol=1e-6)
        assert len(gathers) == gathered, (rank, gathers, gathered)
        gathers.clear()


def test_a2a_gathers_edge_values_once_and_again_when_any_rank_changes_them(tmp_path):
    run(_kept_values_are_gathered_again_when_any_rank_changes_them, 2, tmp_path)
