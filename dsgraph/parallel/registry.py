"""The graph-parallel strategies dsgraph knows: one spec per strategy, listed once.

Config validation, the command line, the trainer, AGP's model and candidates, tools and tests all
read this registry; a new strategy is its own file plus one line in ``BUILTIN``.

``auto``, which composes the others, is listed here like them, although its code lives with AGP
(``dsgraph/agp/auto.py``, a layer above: it needs AGP's profiles and cost model). The list names
each strategy by its import path, and the table is filled when it is first read, not when this
module is imported: by then ``dsgraph.parallel`` is loaded, so importing ``dsgraph.agp.auto`` (which
imports this package) closes no cycle, and no module imports ``dsgraph.agp`` for a side effect to
make ``auto`` exist. The layers hold: no module of this layer imports AGP's (a path resolved when
the table is built, as a plugin's entry point is, is not an import of the code that names it), and
``strategy_names()`` is the same from every entry point.
"""

from __future__ import annotations

import importlib

from dsgraph.parallel.spec import Strategy

BUILTIN = (  # the registry: one line per strategy, "module:class"
    "dsgraph.parallel.ag:AllGather",
    "dsgraph.parallel.a2a:AllToAll",
    "dsgraph.parallel.halo:Halo",
    "dsgraph.parallel.ag_ring:AllGatherRing",
    "dsgraph.agp.auto:Auto",  # composes the others (AGP picks one); its code lives with AGP, a layer above
)

_STRATEGIES: dict[str, Strategy] = {}


def _table() -> dict[str, Strategy]:
    """The strategies by name, built from ``BUILTIN`` on the first read."""
    if not _STRATEGIES:
        built: dict[str, Strategy] = {}
        for entry in BUILTIN:
            module, cls = entry.split(":")
            _add(built, getattr(importlib.import_module(module), cls)())
        _STRATEGIES.update(built)
    return _STRATEGIES


def _add(table: dict[str, Strategy], strategy: Strategy) -> None:
    if not strategy.name or strategy.name in table:
        raise ValueError(f"a strategy needs a new, non-empty name; got {strategy.name!r}")
    table[strategy.name] = strategy


def register(strategy: Strategy) -> None:
    """Adds a strategy that is not in ``BUILTIN`` (a plugin's, a test's)."""
    _add(_table(), strategy)


def get_strategy(name: str) -> Strategy:
    table = _table()
    if name not in table:
        raise ValueError(f"unknown strategy '{name}'; choose from {', '.join(table)}")
    return table[name]


def strategy_names() -> list[str]:
    return list(_table())


def auto_candidates() -> list[str]:
    """The strategies ``auto`` chooses among, in registration order."""
    return [name for name, s in _table().items() if s.auto_candidate]
