"""The ``"agp"`` section of the config: the settings of AGP's ``auto`` strategy and of a run launched
with ``--nprocs auto``, declared once beside their code (``auto.py``, ``decide.py``, ``launch.py``).
The top-level spellings ``agp_profile``, ``agp_recalibrate_after`` and ``launch_plan`` (the
options' names) are accepted too (``FLAT_KEYS``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class AgpConfig:
    profile: str | None = None
    """Strategy 'auto': the AGP profile JSON (`dsgraph profile`); missing or unusable: fall back to 'ag'."""
    plan: str | None = None
    """A launch plan JSON (``dsgraph train --nprocs auto`` writes one): the run takes its strategy,
    refuses a world size other than its rank count, and logs its predictions beside the measured ones."""
    recalibrate_after: int = 5
    """Strategy 'auto': measured steps (after one warm-up step) before the model is recalibrated and
    a strategy predicted >= 20% faster is switched to (0: never)."""

    FLAT_KEYS = {"agp_profile": "profile", "agp_recalibrate_after": "recalibrate_after", "launch_plan": "plan"}
    """Older top-level spellings of the keys (top-level key -> key here), still accepted."""

    def __post_init__(self) -> None:
        if self.recalibrate_after < 0:
            raise ValueError(f"'recalibrate_after' must be >= 0 (0: never), got {self.recalibrate_after}")
