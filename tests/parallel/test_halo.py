"""GP-Halo beyond the conformance suite: on a METIS-relabelled graph with a part whose halo is empty
it still equals the single-process model, its traffic is exactly what the plan says, and the torch
control plane and the asynchronous exchange place rank-encoded rows where they belong."""

import numpy as np
import pytest
import torch

from dsgraph.comm import GraphParallelGroup, RowSplit, start_exchange_rows
from dsgraph.comm.control import TorchControlPlane, make_control_plane
from dsgraph.graph import Graph
from dsgraph.graph.partition import partition_nodes, relabel
from tests.distributed import run
from tests.graphs import random_graph
from tests.parallel.test_conformance import forward_backward, rel_err

pytestmark = pytest.mark.slow  # every test here starts processes


def halo_test_graph(world: int) -> tuple[Graph, list[int]]:
    """random_graph relabelled by METIS into ``world`` parts, minus the edges that reach part 0 from
    other parts (so rank 0's halo is empty while other ranks still read rank 0's rows)."""
    graph = random_graph()
    graph, _, ranges = relabel(graph, partition_nodes(graph, world, "metis", seed=0), world)
    end0 = int(ranges[0, 1])
    rowptr, col = graph.rowptr.numpy(), graph.col.numpy()
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(rowptr))
    keep = ~((dst < end0) & (col >= end0))
    trimmed = Graph.from_edges(
        col[keep],
        dst[keep],
        x=graph.x.numpy(),
        y=graph.y.numpy(),
        train_mask=graph.train_mask.numpy(),
        val_mask=graph.val_mask.numpy(),
        test_mask=graph.test_mask.numpy(),
    )
    return trimmed, (ranges[:, 1] - ranges[:, 0]).tolist()


def _check_halo(rank, world, tmp):
    import deepspeed.comm as dist

    control = make_control_plane()
    assert isinstance(control, TorchControlPlane) and control.world_size == world
    assert control.allgather(("r", rank)) == [("r", r) for r in range(world)]
    assert control.bcast({"from": rank}, root=world - 1) == {"from": world - 1}

    graph, counts = halo_test_graph(world)
    assert int((graph.in_degrees() == 0).sum()) >= 3
    ref_outs, ref_grads, _, _ = forward_backward(graph, GraphParallelGroup.single(graph.num_nodes), "halo")
    pg = GraphParallelGroup.from_world().with_split(RowSplit(tuple(counts)))
    outs, grads, pg, attention = forward_backward(graph, pg, "halo", control=control)
    start, end = pg.rows
    rows = range(start, end)
    for out, ref in zip(outs, ref_outs):
        assert rel_err(out, ref[start:end]) < 1e-5
    for name, grad in grads.items():
        dist.all_reduce(grad)
        assert rel_err(grad, ref_grads[name]) < 1e-5, (name, rel_err(grad, ref_grads[name]))

    plan = attention.plan
    if rank == 0:
        assert plan.num_halo == 0 and plan.rows_sent > 0
    row_bytes = 2 * 32 * 4  # K and V rows of hidden 32 in fp32
    layers = 2  # forward sends plan.rows_sent rows, backward returns plan.num_halo rows' gradients
    assert pg.stats.bytes_sent == layers * row_bytes * (plan.rows_sent + plan.num_halo)

    x = (
        torch.arange(graph.num_nodes, dtype=torch.float64)[rows.start : rows.stop, None]
        .repeat(1, 3)
        .requires_grad_(True)
    )
    pending = start_exchange_rows(x, plan.send_index, plan.send_counts, plan.recv_counts, pg)
    got = pending.wait()
    torch.testing.assert_close(got[:, 0], plan.recv_ids.double(), rtol=0, atol=0)
    got.sum().backward()  # every sent row's gradient is the number of times it was sent
    sent_times = torch.bincount(plan.send_index, minlength=len(rows)).double()
    torch.testing.assert_close(x.grad, sent_times[:, None].expand(-1, 3), rtol=0, atol=0)


@pytest.mark.parametrize("world", [2, 4])
def test_halo_matches_single_process(world, tmp_path):
    run(_check_halo, world, tmp_path)
