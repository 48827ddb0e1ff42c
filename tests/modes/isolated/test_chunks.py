"""Isolated (Grappa) training, pure part: the round-robin schedule (every edge is covered over one
cycle, the chunks travel over every rank), the halo cache's choice, the local subgraph against a
dense reference, the cycle plan, the seed's resampling correction on a hand-built graph, and the
local mini-batches."""

from collections import Counter

import numpy as np
import pytest
import torch

from dsgraph.graph import Graph, load_dataset
from dsgraph.graph.partition import relabel
from dsgraph.modes.isolated.chunks import (
    RotationSchedule,
    assign_chunks,
    batch_sizes,
    correction_weights,
    cycle_plan,
    graph_block,
    local_subgraph,
    num_batches,
    resampling_correction,
    select_halo,
)
from tests.graphs import random_graph


def _chunked(graph, num_chunks, method, seed=0):
    """(relabelled graph, chunk ranges [C, 2])."""
    chunk_of = assign_chunks(graph, num_chunks, method, seed)
    relabelled, _, ranges = relabel(graph, chunk_of, num_chunks)
    return relabelled, ranges


def _edge_keys(graph) -> np.ndarray:
    dst = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), graph.in_degrees().numpy())
    return np.unique(graph.col.numpy().astype(np.int64) * graph.num_nodes + dst)


def _dense(graph) -> np.ndarray:
    """bool [N, N]: dense[dst, src]."""
    n = graph.num_nodes
    dense = np.zeros((n, n), dtype=bool)
    dense[np.repeat(np.arange(n), graph.in_degrees().numpy()), graph.col.numpy()] = True
    return dense


@pytest.mark.parametrize("chunks, world", [(4, 2), (8, 4), (8, 2), (12, 3)])
def test_round_robin_holds_every_chunk_once_pairs_every_two_chunks_and_moves_every_chunk(chunks, world):
    schedule = RotationSchedule(chunks, world)
    assert schedule.cycle_length == chunks - 1
    together = Counter()
    for s in range(schedule.cycle_length):
        held = [schedule.chunks(r, s) for r in range(world)]
        assert sorted(c for h in held for c in h) == list(range(chunks))  # each chunk on exactly one rank
        assert all(len(h) == chunks // world for h in held)
        assert [schedule.holders(s)[c] for c in held[1]] == [1] * len(held[1])
        together.update((a, b) for h in held for a in h for b in h if a < b)
    assert set(together) == {(a, b) for a in range(chunks) for b in range(a + 1, chunks)}  # every pair meets
    if chunks == 2 * world:
        assert set(together.values()) == {1}  # two chunks per rank: exactly once per cycle
    visits = Counter(
        (r, c) for s in range(world * schedule.cycle_length) for r in range(world) for c in schedule.chunks(r, s)
    )
    assert len(visits) == world * chunks and set(visits.values()) == {schedule.cycle_length}  # the work evens out


def test_one_rank_holds_every_chunk():
    schedule = RotationSchedule(3, 1)
    assert schedule.cycle_length == 1 and schedule.chunks(0, 5) == [0, 1, 2]


@pytest.mark.parametrize(
    "chunks, world, message", [(3, 2, "multiple"), (0, 2, "multiple"), (4, 0, "world size"), (6, 2, "even number")]
)
def test_schedule_rejects_chunk_counts_it_cannot_rotate(chunks, world, message):
    with pytest.raises(ValueError, match=message):
        RotationSchedule(chunks, world)


def test_unknown_chunk_method_is_a_value_error():
    with pytest.raises(ValueError, match="unknown chunk method 'contiguous'; choose from random, metis"):
        assign_chunks(random_graph(), 4, "contiguous")


@pytest.mark.parametrize(
    "dataset, world, chunks, method",
    [("random", 2, 4, "random"), ("random", 3, 6, "random"), ("random", 2, 8, "metis"), ("cora", 4, 8, "random")],
)
def test_round_robin_schedule_covers_every_edge_over_one_cycle(dataset, world, chunks, method):
    """Without any halo: the rank that holds an edge's destination (and so computes its loss) has the
    edge in its subgraph in some super-epoch of the cycle, and every node's loss is owned once."""
    graph = (random_graph() if dataset == "random" else load_dataset("cora")).with_self_loops()
    relabelled, ranges = _chunked(graph, chunks, method)
    schedule = RotationSchedule(chunks, world)
    all_edges, n = _edge_keys(relabelled), graph.num_nodes
    seen = []
    for s in range(schedule.cycle_length):
        owner_count = np.zeros(n, dtype=np.int64)
        for rank in range(world):
            held = schedule.chunks(rank, s)
            sub = local_subgraph([graph_block(relabelled, *ranges[c]) for c in held], chunks=held)
            ids = sub.node_ids.numpy()
            keys = ids[sub.graph.col.numpy()] * n + np.repeat(ids, sub.graph.in_degrees().numpy())
            assert np.isin(keys, all_edges).all()  # nothing invented
            seen.append(keys)
            owner_count[ids] += 1
        assert (owner_count == 1).all()
        if s == 0 and world > 1:  # one super-epoch alone does not give every loss its whole neighbourhood
            assert np.unique(np.concatenate(seen)).size < all_edges.size
    assert np.array_equal(np.unique(np.concatenate(seen)), all_edges)


def test_select_halo_takes_the_sources_feeding_the_most_edges():
    graph = random_graph()
    blocks = [graph_block(graph, 0, 30), graph_block(graph, 60, 80)]
    inside = np.zeros(graph.num_nodes, dtype=bool)
    inside[0:30] = inside[60:80] = True
    rows = np.r_[0:30, 60:80]
    src = np.concatenate([graph.col[graph.rowptr[r] : graph.rowptr[r + 1]].numpy() for r in rows])
    counts = np.bincount(src[~inside[src]], minlength=graph.num_nodes)
    halo = select_halo(blocks, 7)
    assert halo.size == 7 and np.all(np.diff(halo) > 0) and not inside[halo].any()
    others = np.setdiff1d(np.flatnonzero(counts), halo)
    assert counts[halo].min() >= counts[others].max()  # nothing left out feeds more edges
    tied = others[counts[others] == counts[halo].min()]
    assert tied.size == 0 or tied.min() > halo[counts[halo] == counts[halo].min()].max()  # ties go to the smaller id
    assert np.array_equal(select_halo(blocks, 10**6), np.flatnonzero(counts))  # a large budget takes them all
    assert select_halo(blocks, 0).size == 0


def test_local_subgraph_with_a_halo_matches_a_dense_reference():
    graph = random_graph().with_self_loops()
    dense = _dense(graph)
    ranges = [(60, 80), (0, 25)]  # not in id order: local ids follow block order
    halo = np.array([90, 40, 26])  # any order: halo row h is halo[h]
    sub = local_subgraph([graph_block(graph, s, e) for s, e in ranges], halo)
    own = np.concatenate([np.arange(s, e) for s, e in ranges])
    ids = np.concatenate([own, halo])
    assert np.array_equal(sub.node_ids.numpy(), ids) and sub.num_own == own.size
    local = np.zeros((ids.size, ids.size), dtype=bool)
    local[np.repeat(np.arange(ids.size), sub.graph.in_degrees().numpy()), sub.graph.col.numpy()] = True
    want = np.zeros_like(local)
    want[: own.size] = dense[np.ix_(own, ids)]  # own rows keep edges from own rows and halo rows
    want[own.size :, own.size :] = np.eye(halo.size, dtype=bool)  # a halo row attends only to itself
    assert np.array_equal(local, want)
    assert np.array_equal(sub.degree, dense[own].sum(1)) and np.array_equal(sub.kept, dense[np.ix_(own, ids)].sum(1))
    assert sub.halo_hits == dense[np.ix_(own, halo)].sum()
    assert sub.halo_misses == dense[own].sum() - dense[np.ix_(own, ids)].sum()
    assert torch.equal(sub.graph.x[: own.size], graph.x[torch.from_numpy(own)])
    assert not sub.graph.x[own.size :].any() and (sub.graph.y[own.size :] == -1).all()  # filled by the exchange
    assert not sub.graph.train_mask[own.size :].any()
    with pytest.raises(ValueError, match="disjoint"):
        local_subgraph([graph_block(graph, 0, 30), graph_block(graph, 20, 40)])
    with pytest.raises(ValueError, match="outside the row blocks"):
        local_subgraph([graph_block(graph, 0, 30)], [5])


def _hand_built() -> list:
    """8 nodes in 4 chunks of 2 ([0,2), [2,4), [4,6), [6,8)), self loops everywhere; in-edges
    0 <- 2, 4, 5, 6;  1 <- 0;  2 <- 4;  6 <- 4. Training nodes 0, 1, 6."""
    src = np.array([0, 1, 2, 3, 4, 5, 6, 7, 2, 4, 5, 6, 0, 4, 4])
    dst = np.array([0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 1, 2, 6])
    train = np.isin(np.arange(8), [0, 1, 6])
    graph = Graph.from_edges(
        src,
        dst,
        x=np.eye(8, dtype=np.float32),
        y=np.arange(8) % 2,
        train_mask=train,
        val_mask=~train,
        test_mask=np.zeros(8, bool),
        num_nodes=8,
    )
    return [graph_block(graph, 2 * c, 2 * c + 2) for c in range(4)]


def test_the_correction_factor_is_the_seeds_formula_on_a_hand_built_graph():
    """Rounds of 4 chunks on 2 ranks: {0,3}|{1,2}, {0,1}|{2,3}, {0,2}|{1,3}. Node 0 (degree 5)
    keeps itself and node 6, then node 2, then nodes 4 and 5: E[|N(v)|] = 7/3 without a halo. With
    a one-node cache per rank, node 4 (feeding two edges) is cached in the first two rounds and
    node 2 (a tie with node 6, the smaller id) in the third: E = (3 + 3 + 4) / 3 = 10/3."""
    parts, schedule = _hand_built(), RotationSchedule(4, 2)
    assert [schedule.group_chunks(g, t) for t in range(3) for g in range(2)] == [
        [0, 3],
        [1, 2],
        [0, 1],
        [2, 3],
        [0, 2],
        [1, 3],
    ]
    for fraction, e0, e6, halo in (
        (0.0, 7 / 3, 4 / 3, [[], [], [], [], [], []]),
        (0.25, 10 / 3, 2.0, [[4], [], [4], [], [2], [4]]),
    ):
        plan = cycle_plan(parts, schedule, fraction)
        assert [plan.halo[t][g].tolist() for t in range(3) for g in range(2)] == halo
        assert plan.expected_kept[[0, 1, 6]] == pytest.approx([e0, 2.0, e6])
        nodes = np.array([0, 1, 6])
        c = correction_weights(
            "resample",
            degree=plan.degree[nodes],
            kept=plan.degree[nodes],
            expected=plan.expected_kept[nodes],
            layers=2,
            uniform_share=plan.uniform_share,
        ).double()
        seed = [1.0 / ((e0 / 5) * (e0 / 5)), 1.0, 1.0 / ((e6 / 2) * (e6 / 2))]  # 1 / prod_l E[|N_l|] / |N_l|
        assert c.tolist() == pytest.approx(seed, rel=1e-6)
        assert (c >= 1).all() and c[0] > c[1]  # larger for the node that keeps less
        share = (e0 + 2.0 + e6) / (5 + 2 + 2)
        assert plan.uniform_share == pytest.approx(share)
    assert resampling_correction(np.array([[1.0, 2.0], [0.5, 2.0]]), np.array([[2.0, 2.0], [1.0, 0.0]])).tolist() == [
        4.0,
        1.0,
    ]


def test_correction_variants():
    degree, kept, expected = np.array([4, 2, 0]), np.array([1, 2, 0]), np.array([2.0, 2.0, 0.0])

    def weights(m):
        return correction_weights(m, degree=degree, kept=kept, expected=expected, layers=3, uniform_share=0.5)

    assert torch.equal(weights("none"), torch.ones(3))
    assert torch.allclose(weights("uniform"), torch.full((3,), 8.0))
    assert torch.allclose(weights("coverage"), torch.tensor([0.5, 1.0, 1.0]))
    assert torch.allclose(weights("resample"), torch.tensor([8.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="unknown isolated correction 'exact'"):
        weights("exact")


def test_cycle_plan_matches_the_local_subgraphs_of_every_round():
    graph = random_graph().with_self_loops()
    relabelled, ranges = _chunked(graph, 4, "random")
    schedule = RotationSchedule(4, 2)
    parts = [graph_block(relabelled, *ranges[c]) for c in range(4)]
    plan = cycle_plan(parts, schedule, 0.1)
    total = np.zeros(graph.num_nodes)
    for s in range(schedule.cycle_length):
        for rank in range(2):
            held = [parts[c] for c in schedule.chunks(rank, s)]
            halo = plan.halo_of(schedule, rank, s)
            assert np.array_equal(halo, select_halo(held, int(0.1 * sum(b.end - b.start for b in held))))
            sub = local_subgraph(held, halo)
            total[sub.node_ids[: sub.num_own].numpy()] += sub.kept
    assert np.allclose(plan.expected_kept, total / schedule.cycle_length)
    assert (plan.expected_kept <= plan.degree).all() and (plan.expected_kept > 0).all()


def test_local_mini_batches_are_the_same_count_on_every_rank():
    assert num_batches([2500, 1200], 1000) == 3 and num_batches([10, 0], 0) == 1 and num_batches([0, 0], 1000) == 1
    assert batch_sizes(7, 3) == [3, 2, 2] and sum(batch_sizes(2500, 3)) == 2500
    assert [t.numel() for t in torch.arange(7).tensor_split(3)] == batch_sizes(7, 3)
