"""The pair-row exchange of link scores: on 2 and 4 gloo ranks with uneven splits, every fetched
row is the right one (rows encode their global id), and the gradients of every rank's rows equal
the single-process gradients, duplicates and pairs inside one rank included."""

import numpy as np
import pytest
import torch

from dsgraph.comm import GraphParallelGroup, RowSplit
from dsgraph.comm.pairs import PairRows
from tests.distributed import run

SPLITS = {2: (9, 23), 4: (3, 11, 0, 18)}  # 32 rows, uneven; rank 2 of 4 owns none
N, D = 32, 3


def _pairs():
    rng = np.random.default_rng(7)
    u, v = rng.integers(0, N, 200), rng.integers(0, N, 200)
    v[:20] = 5  # one row many times
    return torch.from_numpy(u), torch.from_numpy(v), torch.from_numpy(rng.normal(size=(200, D)))


def _reference():
    u, v, w = _pairs()
    z = (torch.arange(N, dtype=torch.float64)[:, None] * 10 + torch.arange(D)).requires_grad_()
    (w * z[u] * z[v]).sum().backward()
    return z.grad


def _check(rank, world, tmp):
    import deepspeed.comm as dist

    pg = GraphParallelGroup.from_world().with_split(RowSplit(SPLITS[world]))
    start, end = pg.rows
    u, v, w = _pairs()
    mine = (u >= start) & (u < end)
    pairs = PairRows(u[mine], v[mine], pg)
    z = (torch.arange(start, end, dtype=torch.float64)[:, None] * 10 + torch.arange(D)).requires_grad_()
    z_u, z_v = pairs.fetch(z)
    assert torch.equal(z_u[:, 0], u[mine].double() * 10) and torch.equal(z_v[:, 0], v[mine].double() * 10)
    assert torch.equal(z_v[:, 2] - z_v[:, 0], torch.full_like(z_v[:, 0], 2.0))
    (w[mine] * z_u * z_v).sum().backward()
    full = torch.zeros(N, D, dtype=torch.float64)
    full[start:end] = z.grad
    dist.all_reduce(full)
    assert torch.allclose(full, _reference(), rtol=1e-12, atol=1e-9)
    remote = int(((v[mine] < start) | (v[mine] >= end)).sum())
    assert sum(pairs.plan.recv_counts) <= remote and (remote == 0) == (sum(pairs.plan.recv_counts) == 0)


@pytest.mark.slow
def test_pair_rows_on_two_and_four_ranks(tmp_path):
    for world in (2, 4):
        run(_check, world, tmp_path)


def test_one_rank_needs_no_exchange():
    u, v, _ = _pairs()
    pg = GraphParallelGroup.single(N)
    z = torch.randn(N, D)
    z_u, z_v = PairRows(u, v, pg).fetch(z)
    assert torch.equal(z_u, z[u]) and torch.equal(z_v, z[v])


def test_pairs_must_start_at_the_ranks_own_rows():
    import pytest

    pg = GraphParallelGroup(rank=0, world_size=2, split=RowSplit((4, 4)))
    with pytest.raises(ValueError, match=r"scores only pairs whose first node is one of its rows \[0, 4\)"):
        PairRows(torch.tensor([5]), torch.tensor([0]), pg).fetch(torch.zeros(4, 2))
