"""The halo plan is a pure function: checked here for every rank at once, without processes, by
simulating the exchange it describes; and the control-plane choice."""

import numpy as np
import pytest
import torch

from dsgraph.comm import RowSplit
from dsgraph.comm.control import choose_control_plane, launched_by_mpi
from dsgraph.comm.halo import HaloPlan
from dsgraph.graph import load_dataset
from dsgraph.graph.partition import halo_ids, partition_nodes, relabel
from tests.graphs import random_graph


def _plans(graph, counts):
    starts = RowSplit(tuple(counts)).starts
    blocks = [graph.rows(starts[r], starts[r + 1]) for r in range(len(counts))]
    halos = [halo_ids(col.numpy(), starts[r], starts[r + 1]) for r, (_, col) in enumerate(blocks)]
    return [HaloPlan.build(rp.numpy(), col.numpy(), starts, r, halos) for r, (rp, col) in enumerate(blocks)], blocks


def _check_plans(graph, counts):
    """Every rank's [local; received] rows, indexed by its compact col, give back the global sources."""
    starts = RowSplit(tuple(counts)).starts
    world = len(counts)
    plans, blocks = _plans(graph, counts)
    ids = torch.arange(graph.num_nodes)  # a rank-encoded "K": row i holds its global id
    for r, plan in enumerate(plans):
        received = []
        for s in range(world):  # what rank s sends to rank r, in rank s's send order
            lo = sum(plans[s].send_counts[:r])
            index = plans[s].send_index[lo : lo + plans[s].send_counts[r]]
            received.append(ids[starts[s] : starts[s + 1]][index])
        assert [int(t.numel()) for t in received] == plan.recv_counts
        assert plan.recv_counts[r] == 0 and plan.send_counts[r] == 0
        compact_ids = torch.cat([ids[starts[r] : starts[r + 1]], *received])
        rowptr, col = blocks[r]
        for c, edges in ((plan.interior_col, plan.interior_edges), (plan.boundary_col, plan.boundary_edges)):
            assert c.dtype == edges.dtype == torch.int32  # half the bytes of int64 below 2^31 edges
            assert torch.equal(compact_ids[c.long()], col.long()[edges.long()])
        assert torch.equal(compact_ids[plan.num_local :], plan.recv_ids)
        # interior rows read only local rows; interior + boundary rebuild every row in order
        assert bool((plan.interior_col < plan.num_local).all())
        rebuilt = {}
        for rows, rp, c in (
            (plan.interior_rows, plan.interior_rowptr, plan.interior_col),
            (plan.boundary_rows, plan.boundary_rowptr, plan.boundary_col),
        ):
            for k, row in enumerate(rows.tolist()):
                rebuilt[row] = compact_ids[c[rp[k] : rp[k + 1]]].tolist()
        assert sorted(rebuilt) == list(range(plan.num_local))
        for row in range(plan.num_local):
            assert rebuilt[row] == col[rowptr[row] : rowptr[row + 1]].tolist()
        order = torch.cat([plan.interior_rows, plan.boundary_rows])
        assert torch.equal(order[plan.row_order], torch.arange(plan.num_local))
    return plans


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_plan_routes_every_halo_row(world):
    graph = random_graph()  # rows without in-edges and a hub
    plans = _check_plans(graph, list(RowSplit.even(graph.num_nodes, world).counts))
    sent = sum(p.rows_sent for p in plans)
    assert sent == sum(p.num_halo for p in plans)
    assert (sent > 0) == (world > 1)


def test_plan_with_an_empty_halo_and_an_empty_part():
    graph = random_graph()
    counts = [30, 0, graph.num_nodes - 30]
    rowptr, col = graph.rowptr.numpy(), graph.col.numpy().copy()
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(rowptr))
    keep = ~((dst < 30) & (col >= 30))  # rank 0 reads nothing remote, but others read its rows
    from dsgraph.graph import Graph

    trimmed = Graph.from_edges(
        col[keep],
        dst[keep],
        x=graph.x.numpy(),
        y=graph.y.numpy(),
        train_mask=graph.train_mask.numpy(),
        val_mask=graph.val_mask.numpy(),
        test_mask=graph.test_mask.numpy(),
    )
    plans = _check_plans(trimmed, counts)
    assert plans[0].num_halo == 0 and plans[0].rows_sent > 0 and plans[0].boundary_rows.numel() == 0
    assert plans[1].num_local == 0 and plans[1].num_halo == 0 and plans[1].rows_sent == 0


def test_plan_rejects_a_halo_list_that_does_not_match_the_block():
    graph = random_graph()
    counts = list(RowSplit.even(graph.num_nodes, 2).counts)
    starts = RowSplit(tuple(counts)).starts
    rowptr, col = graph.rows(0, starts[1])
    with pytest.raises(ValueError, match="rank 0's halo list does not match"):
        HaloPlan.build(rowptr.numpy(), col.numpy(), starts, 0, [np.array([starts[1]], np.int32), np.zeros(0, np.int32)])


def test_halo_moves_at_most_a_quarter_of_all_gather_bytes_on_cora_metis_4_parts():
    """Rows sent per layer (forward; the backward sends the same number back). GP-AG sends its padded
    block to every other rank: max(counts) * (P - 1) rows per rank."""
    graph = load_dataset("cora").with_self_loops()
    parts = partition_nodes(graph, 4, "metis", seed=0)
    graph, _, ranges = relabel(graph, parts, 4)
    counts = (ranges[:, 1] - ranges[:, 0]).tolist()
    plans = _check_plans(graph, counts)
    halo_rows = sum(p.rows_sent for p in plans)
    ag_rows = max(counts) * 3 * 4
    assert halo_rows <= 0.25 * ag_rows, (halo_rows, ag_rows)


@pytest.mark.parametrize(
    "torch_rank, torch_world, mpi_rank, mpi_world, expected",
    [
        (0, 2, None, None, "torch"),  # no MPI launcher
        (1, 2, 0, 1, "torch"),  # deepspeed launcher: every process has a one-rank MPI world
        (0, 1, 0, 1, "torch"),  # one rank: nothing to coordinate
        (1, 2, 1, 2, "mpi"),  # mpiexec -n 2
        (1, 2, 0, 2, "torch"),  # ranks numbered differently: never mix the two
    ],
)
def test_control_plane_choice(torch_rank, torch_world, mpi_rank, mpi_world, expected):
    choice, reason = choose_control_plane(torch_rank, torch_world, mpi_rank, mpi_world)
    assert choice == expected and reason


def test_mpi_launcher_detection():
    assert launched_by_mpi({"PMI_RANK": "0", "PMI_SIZE": "2"}) and launched_by_mpi({"OMPI_COMM_WORLD_SIZE": "2"})
    assert not launched_by_mpi({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
