"""Where a traced step's time goes, from a rank's torch.profiler trace (``--trace-steps A:B``).

A trace's spans are sorted into communication (the collective library's own spans, ``gloo:*`` /
``nccl:*`` and NCCL kernels, which run from the launch of an operation to its completion as seen by
the waiting rank, and dsgraph's ``dsgraph/comm/...`` regions, waits excepted), attention
(``dsgraph/attention/...``) and everything else the rank ran. Per traced step (``dsgraph/step/...``):

* ``comm_ms``: time with communication in flight;
* ``compute_ms``: time running something other than communication;
* ``idle_ms``: the rest of the step's wall time (waits, gaps between operations);
* ``comm_hidden``: the share of ``comm_ms`` during which attention was running too (the overlap figure).

The trainer writes these per rank as ``trace`` rows (TensorBoard ``dsgraph/trace/...``); the
report ``tools/reports/trace_overlap.py`` prints a folder's totals and draws its timelines.
"""

from __future__ import annotations

import gzip
import json

COMM_PREFIXES = ("gloo:", "nccl:", "dsgraph/comm/", "ncclKernel", "ncclDevKernel")
ATTENTION_PREFIX = "dsgraph/attention/"
STEP_PREFIX = "dsgraph/step/"
Span = tuple[float, float]


def load_events(path: str) -> list[tuple[str, float, float]]:
    """(name, start ms, end ms) of every complete event of a trace file (``.json`` or ``.json.gz``), but
    the profiler's own span over the whole recording (category ``Trace``)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return [
        (e["name"], e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3)
        for e in events
        if e.get("ph") == "X" and "dur" in e and e.get("cat") != "Trace"
    ]


def is_comm(name: str) -> bool:
    return name.startswith(COMM_PREFIXES) and not name.endswith("/wait")


def split_spans(events: list[tuple[str, float, float]]) -> tuple[list[Span], list[Span]]:
    """(attention spans, communication spans) of a trace's events."""
    attention = [(a, b) for name, a, b in events if name.startswith(ATTENTION_PREFIX)]
    return attention, [(a, b) for name, a, b in events if is_comm(name)]


def union(spans: list[Span]) -> list[Span]:
    """The spans merged into disjoint intervals, sorted."""
    merged: list[list[float]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def measure(spans: list[Span]) -> float:
    """Total length of disjoint spans."""
    return sum(b - a for a, b in spans)


def overlap(xs: list[Span], ys: list[Span]) -> float:
    """Total time covered by both (disjoint, sorted) interval lists."""
    total, j = 0.0, 0
    for a, b in xs:
        while j < len(ys) and ys[j][1] <= a:
            j += 1
        k = j
        while k < len(ys) and ys[k][0] < b:
            total += max(0.0, min(b, ys[k][1]) - max(a, ys[k][0]))
            k += 1
    return total


def step_figures(events: list[tuple[str, float, float]]) -> list[dict]:
    """Per traced step, in time order: comm_ms, compute_ms, idle_ms, attention_ms, comm_hidden."""
    steps = sorted((a, b) for name, a, b in events if name.startswith(STEP_PREFIX))
    figures = []
    for start, end in steps:
        inside = [(n, max(a, start), min(b, end)) for n, a, b in events if a < end and b > start]
        inside = [(n, a, b) for n, a, b in inside if not n.startswith(STEP_PREFIX) and not n.endswith("/wait")]
        attention, comm = (union(s) for s in split_spans(inside))
        busy = union([(a, b) for n, a, b in inside if not is_comm(n)])
        comm_ms, busy_ms, both = measure(comm), measure(busy), overlap(busy, comm)
        hidden = overlap(attention, comm)
        figures.append(
            {
                "comm_ms": comm_ms,
                "compute_ms": busy_ms - both,
                "idle_ms": max(0.0, (end - start) - (busy_ms + comm_ms - both)),
                "attention_ms": measure(attention),
                "comm_hidden": hidden / comm_ms if comm_ms else 0.0,
            }
        )
    return figures
