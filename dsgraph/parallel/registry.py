"""The graph-parallel strategies dsgraph knows: one spec per strategy, registered once.

Config validation, the command line, the trainer, AGP's model and candidates, tools and tests all
read this registry; a new strategy is its own file plus one line below. ``auto``, which composes
the others, lives with AGP (a layer above) and registers itself there (``dsgraph/agp/__init__.py``).
"""

from __future__ import annotations

from dsgraph.parallel.spec import Strategy

_STRATEGIES: dict[str, Strategy] = {}


def register(strategy: Strategy) -> None:
    if not strategy.name or strategy.name in _STRATEGIES:
        raise ValueError(f"a strategy needs a new, non-empty name; got {strategy.name!r}")
    _STRATEGIES[strategy.name] = strategy


def get_strategy(name: str) -> Strategy:
    if name not in _STRATEGIES:
        raise ValueError(f"unknown strategy '{name}'; choose from {', '.join(_STRATEGIES)}")
    return _STRATEGIES[name]


def strategy_names() -> list[str]:
    return list(_STRATEGIES)


def auto_candidates() -> list[str]:
    """The strategies ``auto`` chooses among, in registration order."""
    return [name for name, s in _STRATEGIES.items() if s.auto_candidate]


BUILTIN = (  # the registry: one line per strategy, "module:class"
    "dsgraph.parallel.ag:AllGather",
    "dsgraph.parallel.a2a:AllToAll",
    "dsgraph.parallel.halo:Halo",
    "dsgraph.parallel.ag_ring:AllGatherRing",
)


def _register_builtin() -> None:
    import importlib

    for entry in BUILTIN:
        module, cls = entry.split(":")
        register(getattr(importlib.import_module(module), cls)())


_register_builtin()
