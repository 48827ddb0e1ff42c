"""Graph-parallel attention strategies (one file each, registered in ``registry.py``) and the pure
part of isolated (Grappa) training."""

from dsgraph.parallel.registry import auto_candidates, get_strategy, register, strategy_names
from dsgraph.parallel.spec import CostTerms, GraphAttention, Needs, Strategy, StrategyContext

__all__ = ["CostTerms", "GraphAttention", "Needs", "Strategy", "StrategyContext", "auto_candidates", "get_strategy",
           "register", "strategy_names"]  # fmt: skip
