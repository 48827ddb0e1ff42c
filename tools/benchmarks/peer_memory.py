#!/usr/bin/env python
"""The largest R-MAT graph (edge factor 16) that trains one full-graph step under one memory cap,
for dsgraph (by strategy, with and without activation checkpointing), PyG TransformerConv and DGL.

    python -m tools.benchmarks.peer_memory --cap-gb 4 --layers 4 --json-out runs/memory/largest.json
    python -m tools.benchmarks.peer_memory --peers pyg,dgl --start 14 --stop 16 --cap-gb 2   # a quick look

The cap: every run is a subprocess whose training process's resident set (VmRSS) is sampled every
0.1 s (tools/common/rss_watch.py); above the cap the run is killed and counts as a failure, as does an
out-of-memory error or a crash. Scales are walked upward from --start, and a peer stops at its
first failure (no bisection); the graph of a scale is generated once, before any run, outside the
measured processes. Same shape for every peer: hidden 128, 8 heads, --layers blocks, FFN x2,
dropout 0.1, fp32, Adam, self loops added to rows without one.

  dsgraph:S[+ckpt]  the training command (``deepspeed.launcher.runner --num_accelerators 1
                    launch/train.py``), strategy S, one epoch (one step, then the evaluation),
                    ZeRO-2; +ckpt: ``checkpoint_activations``. Its peak is the rank process's.
  pyg               tools/benchmarks/bench_models.py's TransformerConv model, one step (forward, backward, Adam).
  dgl               dsgraph's GraphTransformer with DGL 2.1's u_dot_v / edge_softmax / u_mul_e_sum as
                    the attention, one step; run with .venv-dgl/bin/python (DGL's own environment).

This file is small on purpose: tools/benchmarks/peer_models.py (issue 18) has the same PyG and DGL steps for
timing; the two can be merged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DGL_PYTHON = ROOT / ".venv-dgl/bin/python"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--peers",
        default="pyg,dgl,dsgraph:ag,dsgraph:ag+ckpt,dsgraph:a2a,dsgraph:ag_ring,dsgraph:halo",
        help="comma list of pyg, dgl, dsgraph:STRATEGY[+ckpt] "
        "(default: pyg, dgl, and dsgraph's ag, ag+ckpt, a2a, ag_ring, halo)",
    )
    p.add_argument("--cap-gb", type=float, default=4.0, help="memory cap per run, GiB of resident set (default 4)")
    p.add_argument("--start", type=int, default=14, help="first R-MAT scale (default 14)")
    p.add_argument("--stop", type=int, default=22, help="last R-MAT scale tried (default 22)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run (default 1800)")
    p.add_argument("--json-out", default="runs/memory/largest.json")
    p.add_argument("--worker", choices=["pyg", "dgl"], help=argparse.SUPPRESS)  # one step in this process
    p.add_argument("--graph", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --- the workers: one training step of a peer in this process --------------------------------------
def with_self_loops(graph):
    """(source, destination) int64 [E'] of ``graph`` with a self loop added to every row without one."""
    from tools.benchmarks.peer_models import destinations

    looped = graph.with_self_loops()
    return looped.col.long(), destinations(looped.rowptr)


def worker(args) -> int:
    """One training step of a peer (tools/benchmarks/peer_models.py) on the graph with self loops, as dsgraph trains."""
    from dsgraph.graph.npz import load_npz
    from tools.benchmarks.peer_models import build

    graph = load_npz(args.graph).with_self_loops()
    loss = build(args.worker, graph, hidden=args.hidden, heads=args.heads, layers=args.layers).step()
    print(json.dumps({"loss": loss}), flush=True)
    return 0


# --- the driver ------------------------------------------------------------------------------------
def dsgraph_command(args, peer: str, spec: str, folder: Path) -> list[str]:
    from dsgraph.models.options import TRANSFORMER
    from tools.reports.memory_report import write_run_config

    strategy, _, flag = peer.split(":", 1)[1].partition("+")
    config = write_run_config(
        folder,
        dataset=spec,
        strategy=strategy,
        hidden=args.hidden,
        heads=args.heads,
        layers=args.layers,
        epochs=1,
        eval_every=1,
        checkpoint_activations=flag == "ckpt",
        model=TRANSFORMER.to_dict(),
    )  # the shape of the PyG and DGL peers
    return [
        sys.executable,
        "-m",
        "deepspeed.launcher.runner",
        "--master_port",
        "29693",
        "--num_accelerators",
        "1",
        str(ROOT / "launch/train.py"),
        "--deepspeed_config",
        str(config),
        "--backend",
        "cpu",
    ]


def run_peer(args, peer: str, scale: int) -> dict:
    from dsgraph.graph.datasets import dataset_file
    from tools.common.rss_watch import run_watched

    spec = f"rmat:{scale}:16"
    path, _ = dataset_file(spec)
    folder = Path(tempfile.mkdtemp(prefix="dsgraph-peer-memory-"))
    env = dict(os.environ, PYTHONUNBUFFERED="1", DS_ACCELERATOR="cpu")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if peer.startswith("dsgraph:"):
        cmd, match = dsgraph_command(args, peer, spec, folder), "launch/train.py"
    else:
        python = str(DGL_PYTHON) if peer == "dgl" else sys.executable
        shape = ["--layers", str(args.layers), "--hidden", str(args.hidden), "--heads", str(args.heads)]
        cmd, match = [python, str(Path(__file__).resolve()), "--worker", peer, "--graph", path, *shape], ""
    cap_mb = args.cap_gb * 1024
    watched = run_watched(
        cmd, log_path=str(folder / "log.txt"), cap_mb=cap_mb, timeout=args.timeout, match=match, env=env, cwd=str(ROOT)
    )
    peak = max(watched.peaks(), default=None)
    log = (folder / "log.txt").read_text()
    ok = watched.returncode == 0 and (("done:" in log) if peer.startswith("dsgraph:") else '"loss"' in log)
    status = "ok" if ok else "over cap" if watched.over_cap else "timeout" if watched.timed_out else "failed"
    return {
        "peer": peer,
        "scale": scale,
        "status": status,
        "peak_rss_mb": peak,
        "seconds": watched.seconds,
        "log_tail": "" if ok else log[-1500:],
    }


def graph_size(scale: int) -> tuple[int, int]:
    """(nodes, edges with the self loops the peers add) of rmat:SCALE:16, generating it if needed."""
    from dsgraph.graph.datasets import cached_dataset
    from dsgraph.graph.npz import load_npz

    graph = load_npz(cached_dataset(f"rmat:{scale}:16"))
    return graph.num_nodes, int(with_self_loops(graph)[0].numel())


def table(payload: dict) -> str:
    lines = [
        f"cap {payload['cap_gb']:g} GiB resident set per run, {payload['layers']} layers, hidden {payload['hidden']}, "
        f"{payload['heads']} heads, fp32",
        "| peer | largest scale that trained | its edges | its peak RSS MB | next scale |",
        "|---|---|---|---|---|",
    ]
    sizes = payload["sizes"]
    for peer in payload["peers"]:
        runs = [r for r in payload["runs"] if r["peer"] == peer]
        ok = [r for r in runs if r["status"] == "ok"]
        fail = next((r for r in runs if r["status"] != "ok"), None)
        best = ok[-1] if ok else None
        nxt = f"rmat:{fail['scale']} {fail['status']}" if fail else "not tried"
        if best:
            lines.append(
                f"| {peer} | rmat:{best['scale']} | {sizes[str(best['scale'])][1]:,} | {best['peak_rss_mb']:,.0f} "
                f"| {nxt} |"
            )
        else:
            lines.append(f"| {peer} | none | - | - | {nxt} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    from tools.common.bench import write_json

    peers = args.peers.split(",")
    bad = [p for p in peers if p not in ("pyg", "dgl") and not p.startswith("dsgraph:")]
    if bad:
        raise SystemExit(f"peer_memory: unknown peers {bad}; use pyg, dgl or dsgraph:STRATEGY[+ckpt]")
    if "dgl" in peers and not DGL_PYTHON.is_file():
        raise SystemExit(f"peer_memory: the dgl peer needs {DGL_PYTHON} (build it with tools/test_dgl_lane.sh)")
    payload = {
        "format": "dsgraph-peer-memory",
        "cap_gb": args.cap_gb,
        "layers": args.layers,
        "hidden": args.hidden,
        "heads": args.heads,
        "peers": peers,
        "sizes": {},
        "runs": [],
    }
    alive = list(peers)
    for scale in range(args.start, args.stop + 1):
        if not alive:
            break
        payload["sizes"][str(scale)] = graph_size(scale)
        for peer in list(alive):
            result = run_peer(args, peer, scale)
            payload["runs"].append(result)
            write_json(args.json_out, payload)
            print(
                f"rmat:{scale} {peer}: {result['status']}, peak RSS {result['peak_rss_mb'] or 0:,.0f} MB, "
                f"{result['seconds']:.0f} s",
                flush=True,
            )
            if result["status"] != "ok":
                alive.remove(peer)
    print(table(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
