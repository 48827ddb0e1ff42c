"""The training modes, registered once: how a run makes its steps (``mode.py`` says what a mode is)."""

from __future__ import annotations


def _modes() -> dict:
    from dsgraph.train.full_graph import FullGraph
    from dsgraph.train.isolated import Isolated
    from dsgraph.train.sampled import Sampled

    return {mode.name: mode for mode in (FullGraph, Sampled, Isolated)}  # the registry: one entry per mode


def mode_names() -> list[str]:
    return list(_modes())


def make_mode(cfg, pg, control, log, heartbeat):
    """The configured mode, with this rank's data loaded (on the CPU)."""
    modes = _modes()
    if cfg.mode not in modes:
        raise ValueError(f"unknown mode '{cfg.mode}'; choose from {', '.join(modes)}")
    return modes[cfg.mode](cfg, pg, control, log, heartbeat)
