"""The ``"agp"`` section of the config: the settings of AGP's ``auto`` strategy, declared once
beside its code (``auto.py`` and ``decide.py`` read them). The older top-level spellings
``agp_profile`` and ``agp_recalibrate_after`` are still accepted (``FLAT_KEYS``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class AgpConfig:
    profile: str | None = None
    """Strategy 'auto': the AGP profile JSON (`dsgraph profile`); missing or unusable: fall back to 'ag'."""
    recalibrate_after: int = 5
    """Strategy 'auto': measured steps (after one warm-up step) before the model is recalibrated and
    a strategy predicted >= 20% faster is switched to (0: never)."""

    FLAT_KEYS = {"agp_profile": "profile", "agp_recalibrate_after": "recalibrate_after"}
    """Older top-level spellings of the keys (top-level key -> key here), still accepted."""

    def __post_init__(self) -> None:
        if self.recalibrate_after < 0:
            raise ValueError(f"'recalibrate_after' must be >= 0 (0: never), got {self.recalibrate_after}")
