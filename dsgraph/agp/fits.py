"""Fits of measured times against a size: log-log least-squares lines ``t(x) = exp(log_a) * x**slope``
(the attention time against edge-heads), latency plus bandwidth ``t(x) = latency + x * s_per_byte``
(each collective's time against its message size in bytes; profiles written before it have log-log
collectives, which still load), the rest of a layer (``RestFit``: its projections' multiply-adds,
its element-wise work on n x d values, dearer once they outgrow the cache, and a fixed cost per
layer) and the attention kernel (``AttentionFit``: per edge, per edge-head, dearer once the
sources' K/V outgrow the cache, per row-head, per source row-head and per call). Profiles written
before either has a log-log line (or an earlier linear form), which still loads. R^2 is computed in
log space for all of them, so they are comparable.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class LogLogFit:
    """A fitted line in log-log space and the points it was fitted to."""

    log_a: float
    """Intercept: log of the time (s) at x = 1."""
    slope: float
    """Exponent of x (1.0 means time proportional to x)."""
    r2: float
    """Coefficient of determination of the fit, in log space."""
    points: tuple[tuple[float, float], ...] = ()
    """The measured (x, seconds) pairs."""

    def __call__(self, x: float) -> float:
        """Predicted seconds at size ``x`` (0 for x <= 0)."""
        if x <= 0:
            return 0.0
        return math.exp(self.log_a + self.slope * math.log(x))

    def describe(self) -> str:
        return f"{math.exp(self.log_a):.3g} s * x^{self.slope:.3f}"

    def to_dict(self) -> dict:
        return {"log_a": self.log_a, "slope": self.slope, "r2": self.r2, "points": [list(p) for p in self.points]}

    @classmethod
    def from_dict(cls, d: dict, where: str) -> LogLogFit:
        """Reads a fit written by ``to_dict``; ``where`` names it in error messages."""
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object with log_a, slope, r2, got {type(d).__name__}")
        try:
            log_a, slope, r2 = float(d["log_a"]), float(d["slope"]), float(d["r2"])
            points = tuple((float(x), float(t)) for x, t in d.get("points", []))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(
                f"{where}: malformed fit ({err!r}); expected log_a, slope, r2 and [[x, t], ...] points"
            ) from None
        if not all(math.isfinite(v) for v in (log_a, slope, r2)):
            raise ValueError(f"{where}: log_a, slope and r2 must be finite numbers")
        return cls(log_a, slope, r2, points)

    def scaled(self, factor: float) -> LogLogFit:
        """The same line with every time multiplied by ``factor`` (> 0)."""
        return LogLogFit(self.log_a + math.log(factor), self.slope, self.r2, self.points)


def log_r2(times, predicted) -> float:
    """Coefficient of determination of ``predicted`` against measured ``times``, in log space (every
    fit's R^2, so that they are comparable); 1 when the times do not vary."""
    lt = [math.log(t) for t in times]
    mt = sum(lt) / len(lt)
    ss_tot = sum((y - mt) ** 2 for y in lt)
    ss_res = sum((math.log(f) - y) ** 2 for f, y in zip(predicted, lt))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0


def fit_loglog(points: list[tuple[float, float]]) -> LogLogFit:
    """Least-squares line through (log x, log t). Needs two or more points with distinct x > 0, t > 0."""
    pts = [(float(x), float(t)) for x, t in points if x > 0 and t > 0]
    if len({x for x, _ in pts}) < 2:
        raise ValueError(f"a log-log fit needs at least two points with distinct positive sizes, got {points}")
    lx = [math.log(x) for x, _ in pts]
    lt = [math.log(t) for _, t in pts]
    mx, mt = sum(lx) / len(lx), sum(lt) / len(lt)
    sxx = sum((a - mx) ** 2 for a in lx)
    sxt = sum((a - mx) * (b - mt) for a, b in zip(lx, lt))
    slope = sxt / sxx
    log_a = mt - slope * mx
    r2 = log_r2([t for _, t in pts], [math.exp(log_a + slope * a) for a in lx])
    return LogLogFit(log_a, slope, r2, tuple(pts))


@dataclass(frozen=True, slots=True)
class LatencyBandwidthFit:
    """``t(x) = latency_s + s_per_byte * x``: a fixed cost per call plus a cost per byte, the knee
    between them at ``latency_s / s_per_byte`` bytes. The collectives' model: on loopback gloo a
    collective costs nearly the same up to a few hundred KiB and grows with the bytes beyond, which
    no single power of x follows (log-log R^2 0.05-0.82 on the 2-core machine)."""

    latency_s: float
    s_per_byte: float
    r2: float
    """Coefficient of determination in log space, comparable with ``LogLogFit.r2``."""
    points: tuple[tuple[float, float], ...] = ()

    model = "latency_bandwidth"

    def __call__(self, x: float) -> float:
        """Predicted seconds for ``x`` bytes (0 for x <= 0: nothing to send, no call)."""
        if x <= 0:
            return 0.0
        return self.latency_s + self.s_per_byte * x

    def describe(self, unit: str = "byte") -> str:
        """``unit``: what x counts (bytes; "value" for the copy fit)."""
        if self.s_per_byte <= 0:
            return f"{self.latency_s * 1e6:.0f} us + no per-{unit} cost"
        rate = "GB/s" if unit == "byte" else f"G {unit}s/s"
        return f"{self.latency_s * 1e6:.0f} us + {1e-9 / self.s_per_byte:.2f} {rate}"

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "latency_s": self.latency_s,
            "s_per_byte": self.s_per_byte,
            "r2": self.r2,
            "points": [list(p) for p in self.points],
        }

    @classmethod
    def from_dict(cls, d: dict, where: str) -> LatencyBandwidthFit:
        try:
            latency, per_byte, r2 = float(d["latency_s"]), float(d["s_per_byte"]), float(d["r2"])
            points = tuple((float(x), float(t)) for x, t in d.get("points", []))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(
                f"{where}: malformed latency-bandwidth fit ({err!r}); expected latency_s, s_per_byte, r2 and points"
            ) from None
        if not all(math.isfinite(v) for v in (latency, per_byte, r2)) or latency < 0 or per_byte < 0:
            raise ValueError(f"{where}: latency_s and s_per_byte must be finite and >= 0, r2 finite")
        return cls(latency, per_byte, r2, points)

    def scaled(self, factor: float) -> LatencyBandwidthFit:
        return LatencyBandwidthFit(self.latency_s * factor, self.s_per_byte * factor, self.r2, self.points)


def fit_latency_bandwidth(points: list[tuple[float, float]]) -> LatencyBandwidthFit:
    """``latency + per_byte * x`` with the least squared relative error over the points (every size
    weighs the same, as in log space), both terms >= 0. Needs two or more distinct sizes x > 0, t > 0."""
    pts = [(float(x), float(t)) for x, t in points if x > 0 and t > 0]
    if len({x for x, _ in pts}) < 2:
        raise ValueError(
            f"a latency-bandwidth fit needs at least two points with distinct positive sizes, got {points}"
        )
    # minimise sum((a / t + b * x / t - 1)^2): linear least squares in (a, b)
    u = [1.0 / t for _, t in pts]
    v = [x / t for x, t in pts]
    suu, svv, suv = sum(a * a for a in u), sum(b * b for b in v), sum(a * b for a, b in zip(u, v))
    su, sv = sum(u), sum(v)
    det = suu * svv - suv * suv
    a, b = ((su * svv - sv * suv) / det, (sv * suu - su * suv) / det) if det > 0 else (-1.0, -1.0)
    if a < 0 or b < 0:  # the best fit with one term at zero
        candidates = [(su / suu, 0.0), (0.0, sv / svv)]
        a, b = min(candidates, key=lambda c: sum((c[0] * p + c[1] * q - 1.0) ** 2 for p, q in zip(u, v)))
    r2 = log_r2([t for _, t in pts], [a + b * x for x, _ in pts])
    return LatencyBandwidthFit(a, b, r2, tuple(pts))


def fit_from_dict(d: dict, where: str):
    """A fit written by either class's ``to_dict`` (``model`` names it; absent: log-log, as in profiles
    written before the latency-bandwidth model)."""
    return _loglog_or(LatencyBandwidthFit, d, where, "fit")


def _loglog_or(other, d: dict, where: str, what: str):
    """``other.from_dict`` when ``d``'s ``model`` names it, else (``model`` absent or "loglog") a log-log fit."""
    model = d.get("model", "loglog") if isinstance(d, dict) else "loglog"
    if model == other.model or model == getattr(other, "LEGACY_MODEL", None):
        return other.from_dict(d, where)
    if model != "loglog":
        raise ValueError(f"{where}: unknown {what} model '{model}' (expected loglog or {other.model})")
    return LogLogFit.from_dict(d, where)


class _LinearFit:
    """What ``RestFit`` and ``AttentionFit`` share: non-negative coefficients named in ``KEYS``, one
    of which is paid only past a cache (``cache``, in the unit of ``CACHE_FIELD``; 0: no cache term),
    an R^2, the measured points (``POINT_NAMES``, then seconds), their JSON form, and the form an
    older profile wrote (``LEGACY_MODEL``: it had fewer coefficients and no cache; it loads with
    those 0)."""

    __slots__ = ()
    KEYS: tuple[str, ...] = ()
    CACHE_FIELD = ""
    WHAT = ""
    POINT_NAMES = ""
    LEGACY_MODEL = ""

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            **{k: getattr(self, k) for k in self.KEYS},
            self.CACHE_FIELD: self.cache,
            "r2": self.r2,
            "points": [list(p) for p in self.points],
        }

    @classmethod
    def _from_legacy(cls, d: dict) -> dict:
        """``d`` in this form: the coefficients it lacks and the cache 0, its points ``_legacy_points``."""
        points = cls._legacy_points(d.get("points", []))
        return {**dict.fromkeys(cls.KEYS, 0.0), **d, "model": cls.model, cls.CACHE_FIELD: 0.0, "points": points}

    @staticmethod
    def _legacy_points(points: list) -> list:
        """An older form's points in this form's shape (as they are, by default)."""
        return points

    @classmethod
    def from_dict(cls, d: dict, where: str):
        if isinstance(d, dict) and d.get("model") == cls.LEGACY_MODEL:
            d = cls._from_legacy(d)
        width = len(cls.POINT_NAMES.split(", ")) + 1
        try:
            coefficients = [float(d[k]) for k in cls.KEYS]
            cache, r2 = float(d[cls.CACHE_FIELD]), float(d["r2"])
            points = tuple(tuple(float(x) for x in p) for p in d.get("points", []))
            if any(len(p) != width for p in points):
                raise ValueError(f"a point is not ({cls.POINT_NAMES}, seconds)")
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(
                f"{where}: malformed {cls.WHAT} ({err!r}); expected {', '.join(cls.KEYS)}, {cls.CACHE_FIELD}, "
                f"r2 and [[{cls.POINT_NAMES}, seconds], ...] points"
            ) from None
        if not all(math.isfinite(c) and c >= 0 for c in (*coefficients, cache)) or not math.isfinite(r2):
            raise ValueError(f"{where}: {', '.join(cls.KEYS)} and {cls.CACHE_FIELD} must be finite and >= 0, r2 finite")
        return cls(*coefficients, cache, r2, points)

    def scaled(self, factor: float):
        return type(self)(*(getattr(self, k) * factor for k in self.KEYS), self.cache, self.r2, self.points)

    def _past_cache(self, rate: float, unit: str) -> str:
        """``describe``'s note of the cost ``rate`` (s) paid past the cache, in ``unit``; "" without one."""
        return f" (+{rate * 1e9:.3g} past {self.cache:.3g} {unit})" if rate > 0 else ""


CACHE_GRID = tuple(float(2**k) for k in range(10, 25))
"""Cache sizes (1k..16M values, or source row-heads) a fit with a cache term tries."""


def miss_share(size: float, cache: float) -> float:
    """The share of reads of ``size`` values spread uniformly that miss a cache of ``cache`` values:
    1 - cache / size, 0 while they fit (and for a fit without a cache, ``cache`` 0, all of them)."""
    if size <= cache or size <= 0:
        return 0.0
    return 1.0 - cache / size


def _fit_with_cache(columns: np.ndarray, t: np.ndarray, paid: int, sizes: np.ndarray) -> tuple[list, float, float]:
    """``_non_negative_fit`` of ``columns`` with one more column inserted after column ``paid``:
    column ``paid`` times ``miss_share(size, cache)``, the cache the best of ``CACHE_GRID`` (or
    none: the column 0). Returns (coefficients, the cache, R^2)."""
    best = None
    for cache in (0.0, *CACHE_GRID):
        missed = columns[:, paid] * np.array([miss_share(s, cache) if cache else 0.0 for s in sizes])
        rows = np.insert(columns, paid + 1, missed, axis=1)
        coefficients, r2, err = _non_negative_fit(rows, t)
        if best is None or err < best[3] * (1 - 1e-9):
            best = (coefficients, cache if coefficients[paid + 1] > 0 else 0.0, r2, err)
    return best[:3]


@dataclass(frozen=True, slots=True)
class RestFit(_LinearFit):
    """The rest of a layer (everything but the attention kernels: projections, FFN, norms, GELU,
    dropout, residual sums and the copies between them, forward plus backward)::

        t = s_per_mac * MACs + (s_per_value + s_per_missed_value * miss) * values + s_per_layer * layers

    where MACs are the projections' node-MACs (n d^2 (4 + 2 f) per Transformer block), values the
    element-wise work's node-values (n d per block), layers the blocks run, and miss =
    max(0, 1 - cache_values / (values per block)): the element-wise passes stream from memory once a
    block's n x d arrays outgrow the cache. One power of node-MACs cannot follow it: on the 2-core
    CPU a block of (131072, 64) costs 1.6x one of (32768, 128) at the same MACs; without the cache
    term the fit predicted 0.80-0.94 of the blocks of 65k-262k rows."""

    s_per_mac: float
    s_per_value: float
    s_per_missed_value: float
    s_per_layer: float
    cache_values: float
    """Node-values per block the cache holds (0: no cache term)."""
    r2: float
    """Coefficient of determination in log space, comparable with ``LogLogFit.r2``."""
    points: tuple[tuple[float, float, float], ...] = ()
    """The measured (node-MACs, node-values, seconds) of one block each."""

    model = "macs_values_cache"
    KEYS = ("s_per_mac", "s_per_value", "s_per_missed_value", "s_per_layer")
    CACHE_FIELD = "cache_values"
    WHAT = "rest fit"
    POINT_NAMES = "node-MACs, node-values"
    LEGACY_MODEL = "macs_values"  # 2026-12-04: no cache term

    @property
    def cache(self) -> float:
        return self.cache_values

    def __call__(self, macs: float, values: float = 0.0, layers: float = 1.0) -> float:
        """Predicted seconds of ``layers`` blocks with ``macs`` node-MACs and ``values`` node-values
        in all (0 when there is no work)."""
        if macs <= 0 and values <= 0:
            return 0.0
        missed = self.s_per_missed_value * miss_share(values / max(layers, 1.0), self.cache_values)
        return self.s_per_mac * macs + (self.s_per_value + missed) * values + self.s_per_layer * layers

    def describe(self) -> str:
        return (
            f"{self.s_per_mac * 1e12:.3g} ps/MAC + {self.s_per_value * 1e9:.3g} ns/value"
            + self._past_cache(self.s_per_missed_value, "per block")
            + f" + {self.s_per_layer * 1e6:.0f} us/layer"
        )


def _non_negative_fit(rows: np.ndarray, t: np.ndarray) -> tuple[list[float], float, float]:
    """Coefficients c >= 0 of ``rows @ c`` through times ``t`` with the least squared relative error
    (every size weighs the same, as in log space): the best non-negative solution over every subset
    of the columns; its R^2 in log space and its sum of squared relative errors."""
    k_all = rows.shape[1]
    scaled = rows / t[:, None]  # minimise sum((rows @ c / t - 1)^2)
    best, best_err = np.zeros(k_all), math.inf
    for k in range(k_all, 0, -1):
        for terms in itertools.combinations(range(k_all), k):
            sol, *_ = np.linalg.lstsq(scaled[:, terms], np.ones(len(t)), rcond=None)
            if (sol < 0).any():
                continue
            c = np.zeros(k_all)
            c[list(terms)] = sol
            err = float(((scaled @ c - 1.0) ** 2).sum())
            if err < best_err:
                best, best_err = c, err
    r2 = log_r2(t.tolist(), np.maximum(rows @ best, 1e-300).tolist())
    return [float(c) for c in best], r2, best_err


def fit_rest(points: list[tuple[float, float, float]]) -> RestFit:
    """``RestFit`` through (macs, values, seconds) points of one block each, with the least squared
    relative error and non-negative coefficients, the cache the best of ``CACHE_GRID`` (or none).
    Needs three or more points with t > 0 whose (macs, values) are not all proportional."""
    pts = [(float(m), float(v), float(t)) for m, v, t in points if t > 0 and (m > 0 or v > 0)]
    rows = np.array([[m, v, 1.0] for m, v, _ in pts]).reshape(-1, 3)
    t = np.array([p[2] for p in pts])
    if len(pts) < 3 or np.linalg.matrix_rank(rows) < 3:
        raise ValueError(
            "a rest fit needs at least three blocks with positive times whose node-MACs and node-values "
            f"are not in one proportion (blocks of two or more hidden sizes), got {points}"
        )
    coefficients, cache, r2 = _fit_with_cache(rows, t, 1, rows[:, 1])
    return RestFit(*coefficients, cache, r2, tuple(pts))


@dataclass(frozen=True, slots=True)
class AttentionFit(_LinearFit):
    """The fused attention kernel, forward plus backward::

        t = s_per_edge * edges + (s_per_edge_head + s_per_missed_edge_head * miss) * edge_heads
            + s_per_row_head * row_heads + s_per_source_row_head * source_row_heads + s_per_call

    with miss = max(0, 1 - cache_row_heads / source_row_heads): an edge reads its source's K and V
    rows, a scattered read that leaves the cache once the K and V of the call's source rows (its
    source row-heads; one is D values of K and D of V) outgrow it; each source row-head also costs
    apart from its edges (dK and dV are zeroed and written for every source row). On the 2-core CPU
    one edge-head over 16k rows cost 26 ns with 1 MiB of K/V, 52 ns with 64 MiB and 75 ns with
    256 MiB, and a fit without these terms predicted 0.41-0.57 of the largest calls measured (2M
    edges). One power of edge-heads cannot follow it either: an edge costs nearly as much at 4 heads
    as at 8, and a row's softmax, output and gradients cost apart from its edges. ``edge_heads``,
    ``row_heads`` and ``source_row_heads`` are at the profile's head dimension (``head_dim_knee``
    scales the call)."""

    s_per_edge: float
    s_per_edge_head: float
    s_per_missed_edge_head: float
    s_per_row_head: float
    s_per_source_row_head: float
    s_per_call: float
    cache_row_heads: float
    """Source row-heads the cache holds (0: no cache term)."""
    r2: float
    """Coefficient of determination in log space, comparable with ``LogLogFit.r2``."""
    points: tuple[tuple[float, float, float, float, float], ...] = ()
    """The measured (edges, edge-heads, row-heads, source row-heads, seconds) of one kernel call each."""

    model = "gather_cache"
    KEYS = (
        "s_per_edge",
        "s_per_edge_head",
        "s_per_missed_edge_head",
        "s_per_row_head",
        "s_per_source_row_head",
        "s_per_call",
    )
    CACHE_FIELD = "cache_row_heads"
    WHAT = "attention fit"
    POINT_NAMES = "edges, edge-heads, row-heads, source row-heads"
    LEGACY_MODEL = "edges_heads_rows"  # 2026-12-05: no cache and no source terms

    @property
    def cache(self) -> float:
        return self.cache_row_heads

    @staticmethod
    def _legacy_points(points: list) -> list:
        """Its points had no source row-heads: a call's sources were its own rows."""
        return [[*p[:3], p[2], *p[3:]] if isinstance(p, list | tuple) and len(p) == 4 else p for p in points]

    def __call__(
        self, edges: float, edge_heads: float, row_heads: float, source_row_heads: float | None = None
    ) -> float:
        """Predicted seconds of one call (0 when there is no work); ``source_row_heads`` defaults to
        ``row_heads`` (a call whose sources are its own rows)."""
        if edge_heads <= 0 and row_heads <= 0:
            return 0.0
        sources = row_heads if source_row_heads is None else source_row_heads
        per_edge_head = self.s_per_edge_head + self.s_per_missed_edge_head * miss_share(sources, self.cache_row_heads)
        return (
            self.s_per_edge * edges
            + per_edge_head * edge_heads
            + self.s_per_row_head * row_heads
            + self.s_per_source_row_head * sources
            + self.s_per_call
        )

    def describe(self) -> str:
        return (
            f"{self.s_per_edge * 1e9:.3g} ns/edge + {self.s_per_edge_head * 1e9:.3g} ns/edge-head"
            + self._past_cache(self.s_per_missed_edge_head, "source row-heads")
            + f" + {self.s_per_row_head * 1e9:.3g} ns/row-head + {self.s_per_source_row_head * 1e9:.3g} ns/source "
            f"row-head + {self.s_per_call * 1e6:.0f} us"
        )


def fit_attention(points: list[tuple[float, ...]]) -> AttentionFit:
    """``AttentionFit`` through (edges, edge-heads, row-heads, source row-heads, seconds) points with
    the least squared relative error and non-negative coefficients, the cache the best of
    ``CACHE_GRID`` (or none). Needs graphs of two or more degrees, head counts and source counts
    (five or more points whose columns are independent)."""
    pts = [tuple(float(x) for x in p) for p in points if p[4] > 0 and p[1] > 0]
    rows = np.array([[e, eh, rh, srh, 1.0] for e, eh, rh, srh, _ in pts]).reshape(-1, 5)
    if len(pts) < 5 or np.linalg.matrix_rank(rows) < 5:
        raise ValueError(
            "an attention fit needs kernel calls on graphs of two or more degrees, head counts and source "
            f"row counts (edges, edge-heads, row-heads and source row-heads not in one proportion), got {points}"
        )
    t = np.array([p[4] for p in pts])
    coefficients, cache, r2 = _fit_with_cache(rows, t, 1, rows[:, 3])
    return AttentionFit(*coefficients, cache, r2, tuple(pts))


def attention_from_dict(d: dict, where: str) -> LogLogFit | AttentionFit:
    """An attention fit written by ``AttentionFit.to_dict`` (or its 2026-12-05 form, without the cache
    and source terms), or (no ``model``) the log-log line of edge-heads of profiles written before it."""
    return _loglog_or(AttentionFit, d, where, "attention fit")


def attention_seconds(
    fit: LogLogFit | AttentionFit,
    edges: float,
    edge_heads: float,
    row_heads: float,
    d_scale: float = 1.0,
    source_row_heads: float | None = None,
    calls: int = 1,
) -> float:
    """Seconds of ``calls`` attention calls sharing ``edges`` and ``edge_heads``, each over
    ``row_heads`` and ``source_row_heads``, at the profile's head dimension, times the head-dim knee's
    ``d_scale`` = (knee + D) / (knee + D_profile): an ``AttentionFit`` reads every term of each call
    and the knee, a ratio of whole calls, scales them; an old profile's log-log line reads all the
    edge-heads as one call, scaled by the knee (as it always did)."""
    if isinstance(fit, AttentionFit):
        return calls * d_scale * fit(edges / calls, edge_heads / calls, row_heads, source_row_heads)
    return fit(edge_heads * d_scale)


def rest_from_dict(d: dict, where: str) -> LogLogFit | RestFit:
    """A rest fit written by ``RestFit.to_dict`` (or its 2026-12-04 form, without the cache term), or
    (no ``model``) the log-log line of node-MACs of profiles written before it."""
    return _loglog_or(RestFit, d, where, "rest fit")


def rest_seconds(fit: LogLogFit | RestFit, macs: float, values: float, layers: float) -> float:
    """Seconds of the rest of ``layers`` layers with ``macs`` node-MACs and ``values`` node-values
    in all: a ``RestFit`` reads all three, an old profile's log-log line the MACs alone."""
    if isinstance(fit, RestFit):
        return fit(macs, values, layers)
    return fit(macs)
