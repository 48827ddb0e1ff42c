"""Collects the 2026-12-05 runs into one table (rows per mode and rung) and draws the plot."""
import json, glob, os, sys
OUT = sys.argv[1]  # the folder for ladder.json and ladder.png
def rows(path):
    return [json.loads(l) for l in open(path)]
def summary(path, mode, rung, edges, note=""):
    r = rows(path)
    steps = [x for x in r if x["kind"] == "step"]
    fc = [x for x in r if x["kind"] == "forecast"]
    fc = fc[-1] if fc else {}
    ev = [x for x in r if x["kind"] == "eval"]
    epoch0 = [x for x in steps if x["epoch"] == 0]
    return {
        "mode": mode, "rung": rung, "edges": edges, "note": note,
        "steps_in_epoch": len(epoch0),
        "epoch_train_s": round(sum(x["step_time_s"] for x in epoch0), 2) if mode[0] != "f" or len(steps) == 1
        else round(fc["measured_step_time_s"], 2),  # full graph: one step an epoch, the median after the first
        "median_step_s": fc.get("measured_step_time_s"),
        "eval_s": round(ev[-1]["step_time_s"], 2) if ev else None,
        "peak_mb_per_rank": [round(v) for v in fc.get("measured_peak_mem_mb_per_rank", [])],
        "predicted_mb_logged": fc.get("predicted_peak_mem_mb"),
        "test_acc": ev[-1].get("test_acc") if ev else None,
    }
E = {16: 1020594, 17: 2073812, 18: 4200762, 19: 8492334, 20: 16086320, 21: 32417412, 22: 65244545, 24: 263431807, 26: 1060377397}
table = []
full = {16: "runs/cpu_general-20261205T031001Z", 17: "runs/cpu_general-20261205T030857Z", 18: "runs/cpu_general-20261205T031056Z",
        19: "runs/cpu_general-20261205T031215Z", 20: "runs/cpu_general-20261205T031448Z"}
for s, d in full.items():
    table.append(summary(f"/work/main/{d}/metrics.jsonl", "full (ag, bf16)", f"rmat:{s}", E[s]))
table.append(summary("/work/scale/full22.jsonl", "full (ag, bf16)", "rmat:22", E[22], "one epoch: its first step"))
table.append(summary("/work/main/runs/isolated_scale-20261205T031746Z/metrics.jsonl", "isolated (C = 32)", "rmat:20", E[20]))
table.append(summary("/work/scale/iso22.jsonl", "isolated (C = 32)", "rmat:22", E[22]))
if os.path.exists("/work/scale/iso24.jsonl") and "forecast" in open("/work/scale/iso24.jsonl").read():
    table.append(summary("/work/scale/iso24.jsonl", "isolated (C = 32)", "rmat:24", E[24]))
t = summary("/work/main/docs/benchmarks/2026-12-05-isolated-rmat26/rmat26-c128-none.jsonl", "isolated (C = 128)", "rmat:26", E[26], "session of 2026-12-05 01:30; no forecast row then")
t["peak_mb_per_rank"] = [5956, 6066]
table.append(t)
for s, f in ((20, "/work/scale/samp20.jsonl"), (21, "/work/scale/samp21.jsonl"), (22, "/work/scale/samp22b.jsonl")):
    table.append(summary(f, "sampled (2 parts)", f"rmat:{s}", E[s], "batch 1,024, d = 128" if s == 21 else "batch 4,096, d = 64"))
json.dump(table, open(os.path.join(OUT, "ladder.json"), "w"), indent=1)
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
for mode, marker in (("full (ag, bf16)", "o"), ("isolated", "s"), ("sampled (2 parts)", "^")):
    sel = [r for r in table if r["mode"].startswith(mode) and not r["note"].startswith("batch 1,024")]  # one config per line
    xs = [r["edges"] for r in sel]
    a.plot(xs, [max(r["peak_mb_per_rank"]) for r in sel], marker=marker, label=mode)
    b.plot(xs, [r["epoch_train_s"] for r in sel], marker=marker, label=mode)
a.axhline(8192, ls=":", c="grey"); a.text(1.1e6, 8400, "8 GiB", color="grey")
for ax, ylabel in ((a, "peak resident set per rank (MB)"), (b, "one epoch's training steps (s)")):
    ax.set_xscale("log"); ax.set_yscale("log"); ax.set_xlabel("directed edges"); ax.set_ylabel(ylabel); ax.grid(True, which="both", alpha=0.3)
a.legend(); fig.suptitle("2 ranks on the 2-core, 24 GiB VM (2026-12-05)")
fig.tight_layout(); fig.savefig(os.path.join(OUT, "ladder.png"), dpi=110)
for r in table: print(r)
