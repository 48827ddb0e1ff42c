"""AGP (automatic graph parallelism): a measured system profile, a cost and memory model per
(strategy, rank count), and the choice between them.

- ``fits``: log-log least-squares lines with R^2 (time as a power of the work or message size).
- ``profile``: the profile JSON (schema, loading with clear errors, saving).
- ``measure``: the measurements behind a profile (spawned gloo ranks).
- ``model``: pure predictions of per-iteration time and per-rank memory; the scaling test.
- ``choose``: the pick among feasible (strategy, rank count) pairs, with reasons.
- ``decide``: the rank-agreed decision and recalibration used by ``"strategy": "auto"`` training.
- ``auto``: the ``auto`` strategy (the strategy registry, ``dsgraph/parallel/registry.py``, lists it).
- ``config``: the ``agp`` section of the config (``AgpConfig``).
"""

from dsgraph.agp.choose import Choice, choose
from dsgraph.agp.fits import LogLogFit, fit_loglog
from dsgraph.agp.model import GraphShape, ModelShape, Prediction, predict, predict_all, scaling_test
from dsgraph.agp.profile import Profile, load_profile

__all__ = [
    "Choice",
    "GraphShape",
    "LogLogFit",
    "ModelShape",
    "Prediction",
    "Profile",
    "choose",
    "fit_loglog",
    "load_profile",
    "predict",
    "predict_all",
    "scaling_test",
]
