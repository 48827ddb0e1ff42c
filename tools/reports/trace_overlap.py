#!/usr/bin/env python
"""How much communication overlaps attention in the traces of a run (``--trace-steps A:B``).

Reads every rank's torch.profiler trace (``*.pt.trace.json`` in the trace folder, one per rank),
takes the attention regions and the communication in flight (as ``dsgraph.train.trace_figures``
sorts them), and prints per rank the time of each and the time both were active at once. With
``--plot`` it draws one timeline per rank (attention above, communication below) into a PNG. The
training run itself writes these figures per traced step and rank as TensorBoard scalars
(``dsgraph/trace/...``); this report is for a folder of traces after the fact.

    .venv/bin/deepspeed --num_accelerators 2 launch/train.py --deepspeed_config ds_configs/cpu_quickstart.json \\
        --strategy ag_ring --epochs 3 --trace-steps 2:3 --trace-dir runs/traces/ag_ring
    .venv/bin/python -m tools.reports.trace_overlap runs/traces/ag_ring --plot docs/traces/ag_ring.png
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

from dsgraph.train.trace_figures import load_events, overlap, split_spans, union


def summarise(folder: str) -> list[dict]:
    files = sorted(glob.glob(os.path.join(folder, "*.pt.trace.json*")))
    if not files:
        raise FileNotFoundError(
            f"{folder}: no *.pt.trace.json files (train with --trace-steps A:B --trace-dir {folder})"
        )
    rows = []
    for path in files:
        attention, comm = (union(s) for s in split_spans(load_events(path)))
        both = overlap(attention, comm)
        span = sum(b - a for a, b in comm)
        rows.append(
            {
                "file": os.path.basename(path),
                "attention_ms": sum(b - a for a, b in attention),
                "comm_ms": span,
                "overlap_ms": both,
                "comm_hidden": both / span if span else 0.0,
                "attention": attention,
                "comm": comm,
            }
        )
    return rows


def plot(rows: list[dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(rows), 1, figsize=(10, 1.4 * len(rows) + 0.6), squeeze=False)
    start = min(s[0] for r in rows for s in r["attention"] + r["comm"])
    for ax, row in zip(axes[:, 0], rows):
        for lane, (key, colour) in enumerate((("attention", "tab:blue"), ("comm", "tab:orange"))):
            ax.broken_barh([(a - start, b - a) for a, b in row[key]], (1 - lane, 0.8), color=colour, label=key)
        ax.set_yticks([0.4, 1.4], ["communication", "attention"])
        ax.set_title(
            f"{row['file'].split('.')[0]}: {100 * row['comm_hidden']:.0f}% of communication in flight during attention",
            fontsize=9,
        )
    axes[-1, 0].set_xlabel("ms")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="the --trace-dir of a run")
    p.add_argument("--plot", metavar="PNG", help="draw the timelines into this PNG")
    p.add_argument("--json", dest="json_out", metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--title", help="the plot's title (default: the folder)")
    args = p.parse_args(argv)
    try:
        rows = summarise(args.folder)
    except (FileNotFoundError, ValueError, KeyError) as err:
        print(f"trace_overlap: error: {err}", file=sys.stderr)
        return 2
    print(f"{'trace':<40} {'attention ms':>12} {'comm ms':>9} {'both ms':>9} {'comm during attention':>22}")
    for r in rows:
        print(
            f"{r['file'][:40]:<40} {r['attention_ms']:12.1f} {r['comm_ms']:9.1f} {r['overlap_ms']:9.1f} "
            f"{100 * r['comm_hidden']:21.0f}%"
        )
    if args.plot:
        plot(rows, args.plot, args.title or args.folder)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump([{k: v for k, v in r.items() if k not in ("attention", "comm")} for r in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
