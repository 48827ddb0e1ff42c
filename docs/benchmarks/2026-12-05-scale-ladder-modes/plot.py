"""Collected the 2026-12-05 runs into one table (a row per mode and rung) and drew the page's figure.

It read each run's metrics file where the runs left them on the development machine (paths below):
``python plot.py OUT_DIR`` writes OUT_DIR/ladder.json and OUT_DIR/ladder.png. The morning's files
(FULL, ISOLATED, SAMPLED) were deleted after their rows were written; where they are gone, their rows
are taken from OUT_DIR/ladder.json, and the later runs (LATER: the halo column, sampled rmat:24)
are collected from theirs.
"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)

EDGES = {
    16: 1020594,
    17: 2073812,
    18: 4200762,
    19: 8492334,
    20: 16086320,
    21: 32417412,
    22: 65244545,
    24: 263431807,
    26: 1060377397,
}
RUNS = "/work/main/runs"
SCALE = "/work/scale"
FULL = {
    16: f"{RUNS}/cpu_general-20261205T031001Z/metrics.jsonl",
    17: f"{RUNS}/cpu_general-20261205T030857Z/metrics.jsonl",
    18: f"{RUNS}/cpu_general-20261205T031056Z/metrics.jsonl",
    19: f"{RUNS}/cpu_general-20261205T031215Z/metrics.jsonl",
    20: f"{RUNS}/cpu_general-20261205T031448Z/metrics.jsonl",
    22: f"{SCALE}/full22.jsonl",
}
ISOLATED = {
    20: f"{RUNS}/isolated_scale-20261205T031746Z/metrics.jsonl",
    22: f"{SCALE}/iso22.jsonl",
    24: f"{SCALE}/iso24.jsonl",
    26: "docs/benchmarks/2026-12-05-isolated-rmat26/rmat26-c128-none.jsonl",
}
SAMPLED = {20: f"{SCALE}/samp20.jsonl", 21: f"{SCALE}/samp21.jsonl", 22: f"{SCALE}/samp22b.jsonl"}
LATER = [  # (mode, scale, metrics file, note)
    ("full (halo, bf16)", 18, f"{SCALE}/halo18.jsonl", ""),
    ("full (halo, bf16)", 20, f"{SCALE}/halo20.jsonl", ""),
    ("full (halo, bf16)", 22, f"{SCALE}/halo22.jsonl", "one epoch: its first step"),
    ("sampled (2 parts)", 24, f"{SCALE}/samp24.jsonl", "batch 4,096, d = 64"),
]


def summary(path: str, mode: str, scale: int, note: str = "") -> dict:
    rows = [json.loads(line) for line in open(path)]
    steps = [r for r in rows if r["kind"] == "step"]
    forecast = ([r for r in rows if r["kind"] == "forecast"] or [{}])[-1]
    evals = [r for r in rows if r["kind"] == "eval"]
    first_epoch = [r for r in steps if r["epoch"] == 0]
    if mode.startswith("full") and len(steps) > 1:  # one step an epoch: the median after the first
        epoch_s = round(forecast["measured_step_time_s"], 2)
    else:
        epoch_s = round(sum(r["step_time_s"] for r in first_epoch), 2)
    return {
        "mode": mode,
        "rung": f"rmat:{scale}",
        "edges": EDGES[scale],
        "note": note,
        "steps_in_epoch": len(first_epoch),
        "epoch_train_s": epoch_s,
        "median_step_s": forecast.get("measured_step_time_s"),
        "eval_s": round(evals[-1]["step_time_s"], 2) if evals else None,
        "peak_mb_per_rank": [round(v) for v in forecast.get("measured_peak_mem_mb_per_rank", [])],
        "predicted_mb_logged": forecast.get("predicted_peak_mem_mb"),
        "test_acc": evals[-1].get("test_acc") if evals else None,
    }


def table(out_dir: str) -> list[dict]:
    if os.path.exists(FULL[16]):
        out = morning()
    else:
        with open(os.path.join(out_dir, "ladder.json")) as f:
            out = [r for r in json.load(f) if (r["mode"], r["rung"]) not in {(m, f"rmat:{s}") for m, s, _, _ in LATER}]
    return out + [summary(path, mode, scale, note) for mode, scale, path, note in LATER]


def morning() -> list[dict]:
    out = [summary(path, "full (ag, bf16)", s) for s, path in FULL.items()]
    for s, path in ISOLATED.items():
        row = summary(path, f"isolated (C = {128 if s == 26 else 32})", s)
        if s == 26:  # that run (session of 01:30) wrote no forecast row; its page has the peaks
            row["peak_mb_per_rank"] = [5956, 6066]
            row["note"] = "session of 2026-12-05 01:30; no forecast row then"
        out.append(row)
    for s, path in SAMPLED.items():
        out.append(summary(path, "sampled (2 parts)", s, "batch 1,024, d = 128" if s == 21 else "batch 4,096, d = 64"))
    return out


def draw(rows: list[dict], png: str) -> None:
    fig, (peak, time) = plt.subplots(1, 2, figsize=(11, 4.2))
    modes = ("full (ag, bf16)", "o"), ("full (halo, bf16)", "D"), ("isolated", "s"), ("sampled (2 parts)", "^")
    for mode, marker in modes:
        same = [r for r in rows if r["mode"].startswith(mode) and not r["note"].startswith("batch 1,024")]
        same.sort(key=lambda r: r["edges"])
        edges = [r["edges"] for r in same]
        peak.plot(edges, [max(r["peak_mb_per_rank"]) for r in same], marker=marker, label=mode)
        time.plot(edges, [r["epoch_train_s"] for r in same], marker=marker, label=mode)
    peak.axhline(8192, ls=":", c="grey")
    peak.text(1.1e6, 8400, "8 GiB", color="grey")
    for ax, label in ((peak, "peak resident set per rank (MB)"), (time, "one epoch's training steps (s)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("directed edges")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    peak.legend()
    fig.suptitle("2 ranks on the 2-core, 24 GiB VM (2026-12-05)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    rows = table(sys.argv[1])
    with open(os.path.join(sys.argv[1], "ladder.json"), "w") as f:
        json.dump(rows, f, indent=1)
    draw(rows, os.path.join(sys.argv[1], "ladder.png"))
