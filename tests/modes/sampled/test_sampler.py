"""Neighbour sampling: determinism, dedup against per-seed brute force, compact CSR, fanouts."""

import numpy as np
import pytest
import torch

from dsgraph.modes.sampled import NeighborSampler, batch_key, epoch_batches, rank_share
from dsgraph.modes.sampled.sampler import keyed_uniform, permutation_prefix
from dsgraph.ops import sparse_attention
from tests.graphs import random_graph


def _graph():
    return random_graph(num_nodes=103, num_edges=900)


def _reference_draw(key, node, degree, fanout):
    """Scalar partial Fisher-Yates with the sampler's keyed random numbers: offsets drawn for node."""
    if degree <= fanout:
        return list(range(degree))
    perm = list(range(degree))
    for j in range(fanout):
        r = j + int(np.floor(keyed_uniform(key, np.array([node]), j)[0] * (degree - j)))
        perm[j], perm[r] = perm[r], perm[j]
    return perm[:fanout]


def _brute_force(graph, seeds, fanouts, key):
    """Per-seed sampling trees, each sampled on its own: (tree sizes summed, node set, edge set)."""
    rowptr, col = graph.rowptr.numpy(), graph.col.numpy()
    total, nodes, edges = 0, set(), set()
    for seed in seeds:
        frontier = [int(seed)]
        total += 1
        nodes.add(int(seed))
        for fanout in fanouts:
            nxt = []
            for v in frontier:
                lo, deg = rowptr[v], rowptr[v + 1] - rowptr[v]
                for off in _reference_draw(key, v, deg, fanout):
                    u = int(col[lo + off])
                    nxt.append(u)
                    edges.add((v, u))
            total += len(nxt)
            nodes.update(nxt)
            frontier = nxt
    return total, nodes, edges


def _global_edges(sub, drop_self_loops=False):
    """The subgraph's edges as (destination, source) global id pairs."""
    ids = sub.node_ids.numpy()
    dst = np.repeat(np.arange(sub.num_nodes), np.diff(sub.rowptr.numpy()))
    return {(int(ids[d]), int(ids[s])) for d, s in zip(dst, sub.col.numpy()) if not (drop_self_loops and d == s)}


@pytest.mark.parametrize("fanouts", [[3, 2], [2, 4, 2]])
def test_batch_dedup_matches_per_seed_brute_force(fanouts):
    graph = _graph()
    seeds = np.array([5, 11, 42, 60, 99, 3])
    key = batch_key(1, 2, 3)
    sub = NeighborSampler(graph.rowptr, graph.col, fanouts, self_loops=False).sample(seeds, key)
    total, nodes, edges = _brute_force(graph, seeds, fanouts, key)
    assert sub.nodes_before_dedup == total
    assert set(sub.node_ids.tolist()) == nodes and sub.num_nodes == len(nodes)  # each node once
    assert _global_edges(sub) == edges
    assert sub.num_edges == len(edges)  # each edge once
    assert sub.num_nodes < sub.nodes_before_dedup  # the trees overlap on this graph


def test_sampling_is_deterministic_for_a_key_and_varies_across_keys():
    graph = _graph()
    sampler = NeighborSampler(graph.rowptr, graph.col, [2, 2])
    seeds = np.arange(0, 100, 7)
    a, b = sampler.sample(seeds, batch_key(0, 0, 0)), sampler.sample(seeds, batch_key(0, 0, 0))
    for name in ("node_ids", "rowptr", "col"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    others = [sampler.sample(seeds, batch_key(*k)) for k in ((1, 0, 0), (0, 1, 0), (0, 0, 1))]
    assert all(not torch.equal(o.node_ids, a.node_ids) or not torch.equal(o.col, a.col) for o in others)
    assert batch_key(0, 0, 1) != batch_key(0, 1, 0) != batch_key(1, 0, 0)


def test_compact_csr_is_valid_and_feeds_sparse_attention():
    graph = _graph()
    seeds = np.array([9, 5, 77, 0])  # node 0 has no in-edges
    sub = NeighborSampler(graph.rowptr, graph.col, [4, 3], self_loops=True).sample(seeds, batch_key(0, 0, 0))
    n, rowptr, col = sub.num_nodes, sub.rowptr, sub.col
    assert rowptr.dtype == torch.int64 and col.dtype == torch.int32 and rowptr.shape == (n + 1,)
    assert rowptr[0] == 0 and rowptr[-1] == sub.num_edges and bool((rowptr[1:] >= rowptr[:-1]).all())
    assert int(col.min()) >= 0 and int(col.max()) < n
    assert sub.node_ids[: sub.num_seeds].tolist() == seeds.tolist()  # seeds first, in order
    dst = torch.repeat_interleave(torch.arange(n), rowptr[1:] - rowptr[:-1])
    assert int((dst == col.long()).sum()) == n  # one self loop per node
    full = {
        (int(d), int(s))
        for d, s in zip(torch.repeat_interleave(torch.arange(graph.num_nodes), graph.in_degrees()), graph.col)
    }
    assert _global_edges(sub, drop_self_loops=True) <= full  # every sampled edge is a real in-edge
    q, k, v = (torch.randn(n, 2, 4) for _ in range(3))
    y = sparse_attention(rowptr, col, q, k, v, backend="reference")
    assert y.shape == (n, 2, 4) and bool(torch.isfinite(y).all())


def test_fanout_is_respected_per_hop():
    graph = _graph()
    sub = NeighborSampler(graph.rowptr, graph.col, [5, 2], self_loops=False).sample(
        np.array([5, 20, 31]), batch_key(0, 0, 0)
    )
    row_deg = (sub.rowptr[1:] - sub.rowptr[:-1]).numpy()
    true_deg = graph.in_degrees()[sub.node_ids].numpy()
    assert (row_deg[:3] == np.minimum(true_deg[:3], 5)).all()  # seeds: hop 1 draws min(deg, 5)
    assert (row_deg <= 5).all()  # no row exceeds the largest fanout
    hop1 = {s for d, s in _global_edges(sub) if d in (5, 20, 31)}
    ids = sub.node_ids.tolist()
    for node in hop1 - {5, 20, 31}:
        i = ids.index(node)
        assert row_deg[i] == min(true_deg[i], 2)  # hop-2 draws of the hop-1 nodes


def test_permutation_prefix_is_distinct_prefix_consistent_and_uniform():
    nodes = np.arange(20000)
    degrees = np.full(nodes.size, 5)
    k2, k4 = permutation_prefix(7, nodes, degrees, 2), permutation_prefix(7, nodes, degrees, 4)
    assert (k4[:, :2] == k2).all()  # a smaller fanout draws a prefix of a larger one
    assert ((k4 >= 0) & (k4 < 5)).all()
    assert all(len(set(row)) == 4 for row in k4[:500].tolist())
    share = np.bincount(k2.reshape(-1), minlength=5) / nodes.size  # each offset is in a 2-of-5 draw w.p. 0.4
    assert np.abs(share - 0.4).max() < 0.02, share


def test_sampler_rejects_bad_input():
    graph = _graph()
    with pytest.raises(ValueError, match="fanouts"):
        NeighborSampler(graph.rowptr, graph.col, [3, 0])
    sampler = NeighborSampler(graph.rowptr, graph.col, [3])
    for seeds in ([], [1, 1], [103]):
        with pytest.raises(ValueError, match="seeds"):
            sampler.sample(np.array(seeds, dtype=np.int64), 0)


def test_epoch_batches_cover_the_training_nodes_once_and_split_over_ranks():
    train = np.arange(3, 103, 2)  # 50 nodes
    batches = epoch_batches(train, 16, seed=0, epoch=4, world_size=3)
    assert [b.size for b in batches] == [16, 16, 18]  # a last batch of 2 < 3 ranks joins the previous one
    assert sorted(np.concatenate(batches).tolist()) == train.tolist()
    assert all((x == y).all() for x, y in zip(batches, epoch_batches(train, 16, seed=0, epoch=4, world_size=3)))
    assert not (
        np.concatenate(epoch_batches(train, 16, seed=0, epoch=5, world_size=3)) == np.concatenate(batches)
    ).all()
    shares = [rank_share(batches[2], r, 3) for r in range(3)]
    assert [s.size for s in shares] == [6, 6, 6] and (np.concatenate(shares) == batches[2]).all()
    with pytest.raises(ValueError, match="ranks"):
        epoch_batches(train, 2, seed=0, epoch=0, world_size=3)
