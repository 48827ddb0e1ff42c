"""Graph-parallel attention strategies: one file each, listed in ``registry.py``; what makes a
strategy (``spec.py``), its config section (``config.py``: ``ParallelConfig``) and the shapes AGP's
cost model reads (``shapes.py``)."""

from dsgraph.parallel.config import ParallelConfig
from dsgraph.parallel.registry import auto_candidates, get_strategy, register, strategy_names
from dsgraph.parallel.spec import CostTerms, GraphAttention, Needs, Strategy, StrategyContext

__all__ = [
    "CostTerms",
    "GraphAttention",
    "Needs",
    "ParallelConfig",
    "Strategy",
    "StrategyContext",
    "auto_candidates",
    "get_strategy",
    "register",
    "strategy_names",
]
