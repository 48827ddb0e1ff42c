from dsgraph.parallel.strategies import STRATEGIES, AllGatherAttention, AllToAllAttention, build_strategy

__all__ = ["STRATEGIES", "AllGatherAttention", "AllToAllAttention", "build_strategy"]
