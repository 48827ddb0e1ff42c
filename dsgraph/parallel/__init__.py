from dsgraph.parallel.halo import HaloAttention
from dsgraph.parallel.strategies import STRATEGIES, AllGatherAttention, AllToAllAttention, build_strategy

__all__ = ["STRATEGIES", "AllGatherAttention", "AllToAllAttention", "HaloAttention", "build_strategy"]
