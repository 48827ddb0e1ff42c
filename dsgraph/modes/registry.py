"""The training modes, registered once: how a run makes its steps (``base.py`` says what a mode is).

A new mode is its own package beside these (its ``Mode`` subclass, its data path, a config section
of its own if it has settings: ``section``, ``Config`` and ``check_config``) plus one line in ``MODES``
and, for a section, its field in ``DsgraphConfig`` (``dsgraph/train/config.py``, where the field's
docstring documents it). What modes share lives in ``ranks.py``; no mode package imports another.
"""

from __future__ import annotations

from dsgraph.modes.full.mode import FullGraph
from dsgraph.modes.isolated.mode import Isolated
from dsgraph.modes.sampled.mode import Sampled

MODES = {mode.name: mode for mode in (FullGraph, Sampled, Isolated)}  # the registry: one entry per mode
DEFAULT_MODE = FullGraph.name  # what a run without 'mode' trains; the others are also older spellings of 'strategy'


def mode_names() -> list[str]:
    return list(MODES)


def make_mode(cfg, pg, control, log, heartbeat, task):
    """The configured mode, with this rank's data loaded (on the CPU); ``task``: the run's task
    object (``dsgraph.tasks``), which a mode asks for what depends on the task."""
    if cfg.mode not in MODES:
        raise ValueError(f"unknown mode '{cfg.mode}'; choose from {', '.join(MODES)}")
    return MODES[cfg.mode](cfg, pg, control, log, heartbeat, task)
