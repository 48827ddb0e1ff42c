"""Isolated (Grappa) training, pure part: the rotation schedule, the induced subgraphs (every edge is
covered over one rotation cycle), coverage, correction weights, and the corrected gradient being
closer to the full-graph gradient than the uncorrected one."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dsgraph.graph import load_dataset
from dsgraph.graph.partition import relabel
from dsgraph.models import GraphTransformer
from dsgraph.graph.rank_graph import whole_graph
from dsgraph.train.sampled import local_attention
from dsgraph.parallel.isolated import (
    RotationSchedule, assign_chunks, correction_weights, cycle_coverage, graph_block, induced_subgraph,
)  # fmt: skip
from tests.graphs import random_graph


def _chunked(graph, num_chunks, method, seed=0):
    """(relabelled graph, chunk ranges [C, 2])."""
    chunk_of = assign_chunks(graph, num_chunks, method, seed)
    relabelled, _, ranges = relabel(graph, chunk_of, num_chunks)
    return relabelled, ranges


def _subgraph(graph, ranges, schedule, rank, super_epoch):
    chunks = schedule.chunks(rank, super_epoch)
    blocks = [graph_block(graph, *ranges[c]) for c in chunks]
    return induced_subgraph(blocks, schedule.chunks_per_rank, chunks)


def _edge_keys(graph) -> np.ndarray:
    dst = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), graph.in_degrees().numpy())
    return np.unique(graph.col.numpy().astype(np.int64) * graph.num_nodes + dst)


def test_schedule_neighbour_visits_every_other_rank_chunk_once_per_cycle():
    schedule = RotationSchedule(num_chunks=8, world_size=4)
    assert schedule.chunks_per_rank == 2 and schedule.cycle_length == 6
    assert schedule.expected_coverage == pytest.approx(3 / 8)
    for rank in range(4):
        primary = schedule.primary_chunks(rank)
        assert primary == [2 * rank, 2 * rank + 1]
        seen = [schedule.neighbour_chunk(rank, s) for s in range(schedule.cycle_length)]
        assert sorted(seen) == sorted(set(range(8)) - set(primary))
        assert schedule.neighbour_chunk(rank, schedule.cycle_length) == seen[0]  # the cycle repeats
    assert RotationSchedule(3, 1).chunks(0, 5) == [0, 1, 2]  # one rank: the whole graph, no rotation


@pytest.mark.parametrize("chunks, world", [(3, 2), (0, 2), (4, 0)])
def test_schedule_rejects_chunk_counts_that_do_not_split_over_ranks(chunks, world):
    with pytest.raises(ValueError):
        RotationSchedule(chunks, world)


def test_unknown_chunk_method_is_a_value_error():
    with pytest.raises(ValueError, match="unknown chunk method 'contiguous'; choose from random, metis"):
        assign_chunks(random_graph(), 4, "contiguous")


@pytest.mark.parametrize(
    "dataset, world, chunks, method",
    [("random", 2, 4, "random"), ("random", 3, 3, "random"), ("random", 2, 6, "metis"), ("cora", 4, 8, "random")],
)
def test_every_edge_is_in_some_training_subgraph_over_one_rotation_cycle(dataset, world, chunks, method):
    """Stronger than "some rank saw the edge": the rank that owns the edge's destination (and so
    computes its loss) had the edge in its subgraph in some super-epoch of the cycle."""
    graph = (random_graph() if dataset == "random" else load_dataset("cora")).with_self_loops()
    relabelled, ranges = _chunked(graph, chunks, method)
    schedule = RotationSchedule(chunks, world)
    all_edges = _edge_keys(relabelled)
    n = graph.num_nodes
    seen, owned = [], []  # per super-epoch: every edge of a subgraph / those into the rank's primary rows
    for s in range(schedule.cycle_length):
        primary_count = np.zeros(n, dtype=np.int64)
        keys_s, owned_s = [], []
        for rank in range(world):
            sub = _subgraph(relabelled, ranges, schedule, rank, s)
            ids = sub.node_ids.numpy()
            local_dst = np.repeat(np.arange(ids.size), sub.graph.in_degrees().numpy())
            keys = ids[sub.graph.col.numpy()] * n + ids[local_dst]  # the subgraph's edges in relabelled ids
            assert np.isin(keys, all_edges).all()  # nothing invented
            keys_s.append(keys)
            owned_s.append(keys[sub.primary.numpy()[local_dst]])
            primary_count[ids[sub.primary.numpy()]] += 1
        assert (primary_count == 1).all()  # every node's loss is owned by exactly one rank
        seen.append(np.unique(np.concatenate(keys_s)))
        owned.append(np.unique(np.concatenate(owned_s)))
    assert np.array_equal(np.unique(np.concatenate(seen)), all_edges)
    assert np.array_equal(np.unique(np.concatenate(owned)), all_edges)
    if world > 1:  # one super-epoch alone does not give every loss its whole neighbourhood
        assert owned[0].size < all_edges.size


def test_induced_subgraph_matches_a_dense_reference_and_counts_coverage():
    graph = random_graph()
    n = graph.num_nodes
    dense = np.zeros((n, n), dtype=bool)  # dense[dst, src]
    dense[np.repeat(np.arange(n), graph.in_degrees().numpy()), graph.col.numpy()] = True
    ranges = [(60, 80), (0, 25), (90, 103)]  # not in id order: local ids follow block order
    sub = induced_subgraph([graph_block(graph, s, e) for s, e in ranges], num_primary=2)
    ids = np.concatenate([np.arange(s, e) for s, e in ranges])
    assert np.array_equal(sub.node_ids.numpy(), ids)
    local = np.zeros((ids.size, ids.size), dtype=bool)
    local[np.repeat(np.arange(ids.size), sub.graph.in_degrees().numpy()), sub.graph.col.numpy()] = True
    assert np.array_equal(local, dense[np.ix_(ids, ids)])
    degree = dense[ids].sum(1)
    want = np.where(degree > 0, dense[np.ix_(ids, ids)].sum(1) / np.maximum(degree, 1), 1.0)
    assert np.allclose(sub.coverage.numpy(), want)
    assert sub.primary.numpy().tolist() == [True] * 45 + [False] * 13
    assert torch.equal(sub.graph.x, graph.x[torch.from_numpy(ids)])
    with pytest.raises(ValueError, match="disjoint"):
        induced_subgraph([graph_block(graph, 0, 30), graph_block(graph, 20, 40)], num_primary=1)


def test_cycle_coverage_equals_the_subgraphs_coverage_in_every_super_epoch():
    graph = random_graph().with_self_loops()
    relabelled, ranges = _chunked(graph, 6, "random")
    schedule = RotationSchedule(6, 2)
    for rank in range(2):
        primary = [graph_block(relabelled, *ranges[c]) for c in schedule.primary_chunks(rank)]
        cycle = cycle_coverage(primary, ranges, schedule, rank)
        assert cycle.shape == (schedule.cycle_length, sum(b.end - b.start for b in primary))
        for s in range(schedule.cycle_length):
            sub = _subgraph(relabelled, ranges, schedule, rank, s)
            assert np.allclose(cycle[s], sub.coverage[sub.primary].numpy())


def test_correction_weights():
    cycle = torch.tensor([[0.2, 1.0, 0.5], [0.6, 1.0, 0.5]], dtype=torch.float64)  # [S=2, n=3]
    now = cycle[0]
    assert torch.equal(correction_weights(now, cycle, "none", 2, 0.5), torch.ones(3))
    assert torch.allclose(correction_weights(now, cycle, "uniform", 2, 0.5), torch.full((3,), 2.0))
    assert torch.allclose(correction_weights(now, cycle, "coverage", 2, 0.5), torch.tensor([0.5, 1.0, 1.0]))
    assert torch.allclose(correction_weights(now, cycle, "resample", 2, 0.5), torch.tensor([0.04 / 0.2, 1.0, 1.0]))
    for method in ("coverage", "resample"):  # over a cycle every node keeps its full weight
        total = sum(correction_weights(cycle[s], cycle, method, 2, 0.5) for s in range(2))
        assert torch.allclose(total, torch.full((3,), 2.0))
    with pytest.raises(ValueError, match="unknown isolated correction 'exact'"):
        correction_weights(now, cycle, "exact", 2, 0.5)


def _flat_grad(loss, params):
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params, retain_graph=True)])


def _cycle_gradients(world: int, layers: int, seed: int) -> dict[str, torch.Tensor]:
    """The full-graph gradient and, per correction, the isolated gradient summed over ranks the way
    DeepSpeed reduces it, averaged over one rotation cycle (fp64, no dropout, fixed parameters)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: more threads only contend
    try:
        return _cycle_gradients_1(world, layers, seed)
    finally:
        torch.set_num_threads(threads)


def _cycle_gradients_1(world: int, layers: int, seed: int) -> dict[str, torch.Tensor]:
    graph = random_graph(seed=seed).with_self_loops()
    chunks = 2 * world
    relabelled, ranges = _chunked(graph, chunks, "random", seed)
    schedule = RotationSchedule(chunks, world)
    torch.manual_seed(seed)
    model = GraphTransformer(graph.num_features, graph.num_classes, hidden=16, heads=2, layers=layers,
                             dropout=0.0, input_dropout=0.0).double()  # fmt: skip
    params = list(model.parameters())
    count = int(relabelled.train_mask.sum())

    def attention(g):
        return local_attention(whole_graph(g), backend="cpu")

    g = relabelled
    logits = model(g.x.double(), attention(g), torch.arange(g.num_nodes))
    out = {"full": _flat_grad(F.cross_entropy(logits[g.train_mask], g.y[g.train_mask], reduction="sum") / count, params)}
    methods = ("none", "coverage", "resample")
    sums = {m: torch.zeros_like(out["full"]) for m in methods}
    for s in range(schedule.cycle_length):
        for rank in range(world):
            sub = _subgraph(relabelled, ranges, schedule, rank, s)
            logits = model(sub.graph.x.double(), attention(sub.graph), sub.node_ids)
            mask = sub.primary & sub.graph.train_mask
            losses = F.cross_entropy(logits[mask], sub.graph.y[mask], reduction="none")
            primary = [graph_block(relabelled, *ranges[c]) for c in schedule.primary_chunks(rank)]
            cycle = torch.from_numpy(cycle_coverage(primary, ranges, schedule, rank)[:, sub.graph.train_mask[sub.primary].numpy()])
            for m in methods:
                w = correction_weights(sub.coverage[mask], cycle, m, layers, schedule.expected_coverage).double()
                sums[m] += _flat_grad((w * losses).sum() / count, params)
    out.update({m: sums[m] / schedule.cycle_length for m in methods})
    return out


@pytest.mark.parametrize("world, layers", [(2, 2), (4, 2), (2, 4)])
def test_corrected_gradient_is_closer_to_the_full_graph_gradient_over_a_cycle(world, layers):
    grads = _cycle_gradients(world, layers, seed=0)
    full = grads["full"]
    dist = {m: float((grads[m] - full).norm() / full.norm()) for m in ("none", "coverage", "resample")}
    assert dist["none"] > 0.02  # isolation does change the gradient
    assert dist["coverage"] < dist["none"], dist
    assert dist["resample"] < dist["none"], dist
