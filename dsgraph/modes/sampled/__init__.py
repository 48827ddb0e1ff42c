"""Sampled mini-batch training: neighbour sampling, feature store with a hot-node cache, prefetch."""

from dsgraph.modes.sampled.feature_store import (
    FEATURE_DTYPES,
    FeatureStore,
    in_degree_scores,
    sampling_frequency_scores,
)
from dsgraph.modes.sampled.minibatch import BatchBuilder, MiniBatch, epoch_batches, rank_share
from dsgraph.modes.sampled.prefetch import Prefetcher
from dsgraph.modes.sampled.sampler import NeighborSampler, SampledSubgraph, batch_key

__all__ = [
    "FEATURE_DTYPES",
    "FeatureStore",
    "in_degree_scores",
    "sampling_frequency_scores",
    "BatchBuilder",
    "MiniBatch",
    "epoch_batches",
    "rank_share",
    "Prefetcher",
    "NeighborSampler",
    "SampledSubgraph",
    "batch_key",
]
