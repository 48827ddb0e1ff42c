"""How the AGP validation sweep judges its measurements: per configuration, the medians over runs of
every measured (strategy, p), their noise, the pick's distance from the measured best, the
repeatability oracle, and the model's time and memory errors.

Definitions (docs/AGP.md, section 5):

- a pair's time is the median over runs of its per-run time; its noise is the spread of its runs,
  (max - min) / median;
- a configuration is *distinguishable* when its best and second-best pairs' medians differ by more
  than the larger of the two pairs' noise;
- the pick (fastest predicted feasible pair) is a hit when its median is within 10% of the best;
- the oracle picks one run's measured best and is a hit when that pair is within 10% of the best
  under another run's times (every ordered pair of runs): no model can be expected to beat it;
- time error: |predicted - median| / median per measured pair;
- memory error: the same for the layer's peak memory above the resident set before it (measured) and
  the model's per-rank memory less the terms that were already resident (``RESIDENT_TERMS``).

At p = 1 every strategy runs the same single-rank layer, so only GP-AG is measured there and a pick
of another strategy at p = 1 is judged by that time.
"""

from __future__ import annotations

import statistics

WITHIN = 0.10
RESIDENT_TERMS = ("optimizer states", "features", "graph")
"""The model's memory terms that the sweep's baseline already holds before a layer runs."""


def measured_as(strategy: str, p: int, first: str) -> tuple[str, int]:
    """The measurement that stands for (strategy, p): GP-AG's at p = 1."""
    return (first, 1) if p == 1 else (strategy, p)


def spread(values: list[float]) -> float:
    """(max - min) / median of one pair's per-run values (0 for a single run)."""
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def transient_bytes(prediction) -> float:
    """The model's memory of one layer's forward and backward, above what was resident before."""
    return prediction.memory_bytes - sum(prediction.memory_terms.get(t, 0.0) for t in RESIDENT_TERMS)


def judge(pairs: dict, first: str) -> dict:
    """One configuration. ``pairs``: (strategy, p) -> {"predicted_s", "times": [per run], ...} for the
    feasible pairs (p = 1 for every strategy, standing for GP-AG's measurement). Returns the pick, the
    best, the gap to the second best, the noise, and whether the pick is a hit."""
    median = {k: statistics.median(v["times"]) for k, v in pairs.items()}
    distinct = sorted({measured_as(s, p, first) for s, p in pairs}, key=lambda k: median[k])
    best = distinct[0]
    pick = min(pairs, key=lambda k: pairs[k]["predicted_s"])
    out = {
        "pick": pick,
        "best": best,
        "pick_over_best": median[measured_as(*pick, first)] / median[best],
    }
    out["hit"] = out["pick_over_best"] <= 1 + WITHIN
    if len(distinct) > 1:
        second = distinct[1]
        out["second"] = second
        out["gap"] = median[second] / median[best] - 1
        out["noise"] = max(spread(pairs[best]["times"]), spread(pairs[second]["times"]))
        out["distinguishable"] = out["gap"] > out["noise"]
    else:
        out.update(second=None, gap=float("inf"), noise=0.0, distinguishable=True)
    return out


def oracle_hits(pairs: dict, first: str, runs: int) -> list[bool]:
    """For every ordered pair of runs (a, b): is run a's measured best within 10% of the best under run b?"""
    keys = sorted({measured_as(s, p, first) for s, p in pairs})
    hits = []
    for a in range(runs):
        for b in range(runs):
            if a == b:
                continue
            chosen = min(keys, key=lambda k: pairs[k]["times"][a])
            best_b = min(pairs[k]["times"][b] for k in keys)
            hits.append(pairs[chosen]["times"][b] <= (1 + WITHIN) * best_b)
    return hits


def errors(pairs: dict, first: str) -> tuple[list[float], list[float]]:
    """Relative |predicted - measured| of time and of memory, once per measured pair."""
    time_err, mem_err = [], []
    for (s, p), v in pairs.items():
        if measured_as(s, p, first) != (s, p):
            continue
        t = statistics.median(v["times"])
        time_err.append(abs(v["predicted_s"] - t) / t)
        m = statistics.median(v["peaks"])
        if m > 0:
            mem_err.append(abs(v["predicted_transient_bytes"] - m) / m)
    return time_err, mem_err


def pct(hits: list[bool]) -> float:
    return 100.0 * sum(hits) / len(hits) if hits else float("nan")


def summarise(judged: list[dict], oracle: list[bool], time_err: list[float], mem_err: list[float]) -> dict:
    """The sweep's figures from every configuration's ``judge`` result and the pooled oracle and errors."""
    dist = [j for j in judged if j["distinguishable"]]

    def quantile(xs, q):
        return 100.0 * sorted(xs)[int(q * (len(xs) - 1))] if xs else float("nan")

    return {
        "configurations": len(judged),
        "distinguishable_configurations": len(dist),
        "selection_accuracy_pct": pct([j["hit"] for j in judged]),
        "selection_accuracy_distinguishable_pct": pct([j["hit"] for j in dist]),
        "oracle_selection_accuracy_pct": pct(oracle),
        "oracle_comparisons": len(oracle),
        "measured_pairs": len(time_err),
        "median_abs_time_error_pct": 100.0 * statistics.median(time_err),
        "p90_abs_time_error_pct": quantile(time_err, 0.9),
        "median_abs_memory_error_pct": 100.0 * statistics.median(mem_err) if mem_err else float("nan"),
        "p90_abs_memory_error_pct": quantile(mem_err, 0.9),
        "median_noise_pct": 100.0 * statistics.median([j["noise"] for j in judged]),
    }
