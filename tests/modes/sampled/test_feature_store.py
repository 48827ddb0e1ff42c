"""Feature store: gathered rows, cache choice and hit accounting, bf16 storage."""

import numpy as np
import pytest
import torch

from dsgraph.modes.sampled import FeatureStore, in_degree_scores, sampling_frequency_scores
from tests.graphs import random_graph


def test_gather_returns_the_rows_and_counts_cache_hits():
    x = torch.randn(50, 6)
    scores = torch.arange(50, dtype=torch.float64)  # nodes 40..49 are the hottest
    store = FeatureStore(x, cache_fraction=0.2, hot_scores=scores)
    assert sorted(store.cached_ids.tolist()) == list(range(40, 50))
    ids = torch.tensor([45, 3, 49, 49, 10, 40, 0])
    rows, hits = store.gather(ids)
    assert torch.equal(rows, x[ids])
    assert hits == 4 and (store.hits, store.misses) == (4, 3)
    store.gather(torch.tensor([1, 2, 41]))
    assert store.hit_rate == pytest.approx(5 / 10)
    store.reset_counts()
    assert store.hit_rate == 0.0


def test_bfloat16_storage_halves_the_table_and_rounds_once():
    x = torch.randn(64, 8)
    fp32 = FeatureStore(x, dtype=torch.float32)
    bf16 = FeatureStore(x, dtype=torch.bfloat16, cache_fraction=0.5, hot_scores=torch.rand(64, dtype=torch.float64))
    assert bf16.table_bytes * 2 == fp32.table_bytes
    rows, _ = bf16.gather(torch.arange(64))
    assert rows.dtype == torch.bfloat16 and torch.equal(rows, x.to(torch.bfloat16))


def test_no_cache_and_bad_settings():
    store = FeatureStore(torch.randn(10, 2))
    _, hits = store.gather(torch.arange(10))
    assert hits == 0 and store.cache_bytes == 0
    with pytest.raises(ValueError, match="cache_fraction"):
        FeatureStore(torch.randn(10, 2), cache_fraction=1.5, hot_scores=torch.zeros(10))
    with pytest.raises(ValueError, match="hot_scores"):
        FeatureStore(torch.randn(10, 2), cache_fraction=0.5)
    with pytest.raises(ValueError, match="dtype"):
        FeatureStore(torch.randn(10, 2), dtype=torch.float16)


def test_hotness_scores_match_brute_force():
    graph = random_graph()
    rowptr, col = graph.rowptr.numpy(), graph.col.numpy()
    fanout = 3
    want = np.zeros(graph.num_nodes)
    for v in range(graph.num_nodes):
        deg = rowptr[v + 1] - rowptr[v]
        for u in col[rowptr[v] : rowptr[v + 1]]:
            want[u] += min(1.0, fanout / deg)
    assert np.allclose(sampling_frequency_scores(graph.rowptr, graph.col, fanout).numpy(), want)
    assert torch.equal(in_degree_scores(graph.rowptr), graph.in_degrees().double())
