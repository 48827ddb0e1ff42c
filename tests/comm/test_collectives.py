"""Collectives placed every element where the contract says, forward and backward (rank-encoded)."""

import pytest
import torch

from dsgraph.comm import (
    GraphParallelGroup,
    RowSplit,
    all_reduce_sum,
    exchange_rows,
    gather_rows,
    heads_to_nodes,
    nodes_to_heads,
)
from dsgraph.comm.allreduce import all_reduce_bytes
from tests.distributed import run

N, H, D = 11, 4, 3  # 11 rows split unevenly over 2 or 4 ranks


def _global_tensor():
    return torch.arange(N * H * D, dtype=torch.float64).view(N, H, D)


def _check_collectives(rank, world, tmp):
    pg = GraphParallelGroup.from_world().with_split(RowSplit.even(N, world))
    counts, start = pg.counts, pg.rows[0]
    full = _global_tensor()
    local = full[start : start + counts[rank]].clone().requires_grad_(True)

    gathered = gather_rows(local, pg)
    torch.testing.assert_close(gathered, full, rtol=0, atol=0)
    gathered.backward(torch.full_like(gathered, float(rank + 1)))  # reduce-scatter sums over ranks
    torch.testing.assert_close(local.grad, torch.full_like(local, world * (world + 1) / 2), rtol=0, atol=0)

    local.grad = None
    heads = nodes_to_heads(local, pg)
    h = H // world
    torch.testing.assert_close(heads, full[:, rank * h : (rank + 1) * h], rtol=0, atol=0)
    back = heads_to_nodes(heads, pg)
    torch.testing.assert_close(back, local.detach(), rtol=0, atol=0)
    (back * full[start : start + counts[rank]]).sum().backward()
    torch.testing.assert_close(local.grad, full[start : start + counts[rank]], rtol=0, atol=0)

    # halo-style exchange: every rank sends its first row to every other rank
    local.grad = None
    send_index = torch.zeros(world - 1, dtype=torch.long)
    send_counts = [0 if r == rank else 1 for r in range(world)]
    received = exchange_rows(local, send_index, send_counts, send_counts, pg)
    others = [pg.starts[r] for r in range(world) if r != rank]
    torch.testing.assert_close(received, full[others], rtol=0, atol=0)
    received.sum().backward()
    expected = torch.zeros_like(local)
    expected[0] = world - 1
    torch.testing.assert_close(local.grad, expected, rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_collectives_place_rank_encoded_rows(world, tmp_path):
    run(_check_collectives, world, tmp_path)


def _check_all_reduce(rank, world, tmp):
    pg = GraphParallelGroup.from_world().with_split(RowSplit.even(N, world))
    x = torch.full((H, D), float(rank + 1), dtype=torch.float64, requires_grad=True)
    total = all_reduce_sum(x, pg)  # every rank holds 1 + 2 + ... + P
    torch.testing.assert_close(total, torch.full((H, D), world * (world + 1) / 2, dtype=torch.float64), rtol=0, atol=0)
    (total * (rank + 1)).sum().backward()  # each rank's loss reads the total with its own weight
    torch.testing.assert_close(x.grad, torch.full_like(x, world * (world + 1) / 2), rtol=0, atol=0)
    assert pg.stats.calls == 2 and pg.stats.bytes_sent == 2 * all_reduce_bytes(H * D * 8, world)


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_all_reduce_sum_adds_every_rank_forward_and_backward(world, tmp_path):
    run(_check_all_reduce, world, tmp_path)


def test_single_rank_collectives_are_identity():
    pg = GraphParallelGroup.single(N)
    x = _global_tensor()
    assert gather_rows(x, pg) is x
    assert nodes_to_heads(x, pg) is x
    assert heads_to_nodes(x, pg) is x
    assert all_reduce_sum(x, pg) is x
