"""Failures on some ranks while every rank loads its graph, reported on all of them."""

from __future__ import annotations


def raise_if_any_rank_failed(control, error: Exception | None) -> None:
    """Collective: every rank learns whether any rank failed, so all stop together with the messages
    of every failed rank (instead of the healthy ones waiting in a collective)."""
    reports = control.allgather(None if error is None else (type(error).__name__, str(error)))
    failed = [(r, kind, msg) for r, rep in enumerate(reports) if rep is not None for kind, msg in [rep]]
    if not failed:
        return
    lines = "\n".join(f"  rank {r}: {msg}" for r, _, msg in failed)
    cls = FileNotFoundError if all(kind == "FileNotFoundError" for _, kind, _ in failed) else ValueError
    raise cls(f"loading the graph failed on {len(failed)} of {control.world_size} rank(s):\n{lines}")
