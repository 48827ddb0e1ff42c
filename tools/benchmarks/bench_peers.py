#!/usr/bin/env python
"""dsgraph beside PyG and DGL on the same graphs: attention kernels and a full training step.

    python -m tools.benchmarks.bench_peers --graph rmat:16 --graph rmat:18 --train-graph rmat:18 --plot runs/peers.png
    python -m tools.benchmarks.bench_peers --graph rmat:20 --repeats 2 --peers dsgraph,dgl --train-graph none

Peers (see tools/benchmarks/peer_models.py): dsgraph's fused CPU kernels; PyG-style message passing (gather,
``torch_geometric.utils.softmax``, index_add) and TransformerConv blocks; DGL 2.1's sparse ops
(``u_dot_v``, ``edge_softmax``, ``u_mul_e_sum``). DGL needs torch 2.2, so it runs in its own
environment (.venv-dgl, built by tools/test_dgl_lane.sh) as a worker subprocess of this script
(``--worker``: JSON lines on stdin and stdout); dsgraph and PyG run in this process.

Kernels: per graph, q, k, v, dy standard normal [N, H, D] fp32; every peer warms up once, then
the peers take turns, one timed forward and backward each per round (so machine noise hits all
alike), right after --turn-warmup untimed ones of its own (default 1), so that the timed call
runs as it would in a loop of its own rather than after the other peers' turns: on a VM whose
host takes freed memory back (free page reporting, as on the machine of docs/benchmarks/2026-12-01-cpu-kernels.md),
memory freed during a turn of several seconds faults in again at 1-3 GB/s (rmat:18, dsgraph,
3 s pauses: backward 465-849 ms, against 244-345 ms in an experiment that kept its freed
blocks resident for reuse). Reported: min and median forward and backward ms, peak extra memory
of one forward and backward (resident-set high-water mark above the level before it: numpy,
numba and torch all count), dsgraph's speedup (a peer's min fwd+bwd over dsgraph's), dsgraph's
backward / forward, and its forward's share of the copy bandwidth under bench_kernels' no-reuse
traffic model.
PyG is left out from --pyg-max-edges edges up, kernels and training (it holds several E x H x D
tensors: about 2 GB each on rmat:18, H*D = 128, fp32).

Training: the graph with a self loop per row (as dsgraph's trainer adds), hidden 128, 8 heads, 2
layers, FFN x2, dropout 0.1, Adam, fp32; warm-up step, then the peers take turns, one timed step
each per round (after --turn-warmup untimed ones). Step ms (min, median), peak extra MB of a
step, loss after the last step, dsgraph's speedup. Every figure also goes to --json-out. Hold the
measurement lock around the whole command.

Every peer runs with the same torch CPU allocator setting: THP_MEM_ALLOC_ENABLE as ``import
dsgraph`` leaves it (1 unless set; the DGL worker inherits it), printed in the header. Run with
THP_MEM_ALLOC_ENABLE=0 to compare all peers on small pages.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import dsgraph  # noqa: F401  (before any large tensor: it sets THP_MEM_ALLOC_ENABLE, see below)
from tools.benchmarks import peer_models
from tools.common.bench import cpu_peak_supported, is_out_of_memory, peak_extra_bytes, write_json

ROOT = Path(__file__).resolve().parents[2]
PEERS = ("dsgraph", "pyg", "dgl")
DGL_PYTHON = ROOT / ".venv-dgl" / "bin" / "python"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--graph",
        action="append",
        help="kernel graphs: rmat:SCALE[:EF] | cora | PATH.npz (repeatable; default rmat:16)",
    )
    p.add_argument(
        "--train-graph", action="append", help="training-step graphs (repeatable; default rmat:16; 'none' for none)"
    )
    p.add_argument("--peers", default=",".join(PEERS), help=f"comma list from {','.join(PEERS)} (default all)")
    p.add_argument("--heads", type=int, default=8, help="attention heads H (default 8)")
    p.add_argument("--dim", type=int, default=16, help="head dim D of the kernels (default 16)")
    p.add_argument("--hidden", type=int, default=128, help="hidden size of the models (default 128)")
    p.add_argument("--layers", type=int, default=2, help="blocks of the models (default 2)")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds of kernels after a warm-up (default 3)")
    p.add_argument("--steps", type=int, default=3, help="timed training steps per model after a warm-up (default 3)")
    p.add_argument(
        "--turn-warmup",
        type=int,
        default=1,
        help="untimed calls or steps of a peer right before each timed one (default 1)",
    )
    p.add_argument("--threads", type=int, default=None, help="CPU threads of every peer (default: torch's)")
    p.add_argument(
        "--pyg-max-edges",
        type=int,
        default=2_000_000,
        help="PyG runs only on graphs with fewer edges (default 2,000,000)",
    )
    p.add_argument(
        "--dgl-python", default=str(DGL_PYTHON), help="python of the DGL environment (default .venv-dgl/bin/python)"
    )
    p.add_argument("--plot", help="write a bar chart (PNG) of the times here (needs matplotlib)")
    p.add_argument("--json-out", help="write every figure to this JSON file")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # the DGL subprocess
    return p.parse_args(argv)


# --- what one peer does, the same in this process and in the worker ------------------------------
class PeerState:
    """One peer's graph, inputs and model; ``handle`` runs one command on it."""

    def __init__(self, name: str):
        self.name, self.graphs, self.work = name, {}, None

    def graph(self, spec: str, self_loops: bool):
        from dsgraph.graph.datasets import cached_dataset
        from dsgraph.graph.npz import load_npz

        key = (spec, self_loops)
        if key not in self.graphs:  # every lane reads the one cached file (generated once, by the first)
            g = load_npz(cached_dataset(spec))
            self.graphs = {key: g.with_self_loops() if self_loops else g}  # one graph at a time
        return self.graphs[key]

    def handle(self, cmd: dict) -> dict:
        try:
            return getattr(self, "op_" + cmd["op"])(cmd)
        except (torch.OutOfMemoryError, RuntimeError, MemoryError) as err:
            if not (isinstance(err, MemoryError) or is_out_of_memory(err)):
                raise
            self.work = None
            return {"oom": True, "error": str(err).splitlines()[0][:300]}

    def op_kernel_setup(self, cmd: dict) -> dict:
        self.work = None
        g = self.graph(cmd["graph"], False)
        gen = torch.Generator().manual_seed(0)
        q, k, v, dy = (torch.randn(g.num_nodes, cmd["heads"], cmd["dim"], generator=gen) for _ in range(4))
        attention = peer_models.KERNELS[self.name](g.rowptr, g.col)
        self.work = (attention, [t.requires_grad_() for t in (q, k, v)], dy)
        self.op_kernel_time({})  # warm-up: compilation, cached transposes
        return {"oom": False, "nodes": g.num_nodes, "edges": g.num_edges}

    def op_kernel_time(self, cmd: dict) -> dict:
        attention, (q, k, v), dy = self.work
        times = {}

        def fwd_bwd():
            q.grad = k.grad = v.grad = None
            t0 = time.perf_counter()
            y = attention(q, k, v)
            t1 = time.perf_counter()
            torch.autograd.backward(y, dy)
            times.update(fwd=t1 - t0, bwd=time.perf_counter() - t1)

        for _ in range(cmd.get("warmup", 0)):
            fwd_bwd()
        _, peak = peak_extra_bytes(fwd_bwd, q.device) if cpu_peak_supported() else (fwd_bwd(), None)
        return {"oom": False, **times, "peak": peak}

    def op_train_setup(self, cmd: dict) -> dict:
        self.work = None
        g = self.graph(cmd["graph"], True)
        self.work = peer_models.build(self.name, g, cmd["hidden"], cmd["heads"], cmd["layers"])
        self.work.step()  # warm-up
        return {"oom": False, "nodes": g.num_nodes, "edges": g.num_edges}

    def op_train_step(self, cmd: dict) -> dict:
        times = {}
        for _ in range(cmd.get("warmup", 0)):
            self.work.step()

        def step():
            t0 = time.perf_counter()
            times["loss"] = self.work.step()
            times["step"] = time.perf_counter() - t0

        _, peak = peak_extra_bytes(step, torch.device("cpu")) if cpu_peak_supported() else (step(), None)
        return {"oom": False, **times, "peak": peak}

    def op_release(self, cmd: dict) -> dict:
        self.work, self.graphs = None, {}
        return {"oom": False}


def worker_main(threads: int | None) -> None:
    """The DGL subprocess: one JSON command per stdin line, one JSON answer per stdout line."""
    if threads:
        torch.set_num_threads(threads)
    out, sys.stdout = sys.stdout, sys.stderr  # only answers go to the real stdout
    state = PeerState("dgl")
    for line in sys.stdin:
        out.write(json.dumps(state.handle(json.loads(line))) + "\n")
        out.flush()


class WorkerLane:
    """A peer in a subprocess (DGL's environment), with PeerState's commands."""

    def __init__(self, python: str, threads: int | None):
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        cmd = [python, str(Path(__file__).resolve()), "--worker"] + (["--threads", str(threads)] if threads else [])
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)

    def handle(self, cmd: dict) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"bench_peers: the DGL worker exited (code {self.proc.wait()}); its errors are above")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def open_lanes(args: argparse.Namespace) -> tuple[dict, list[str]]:
    """{peer: lane} for the requested peers that can run here, and notes on those left out."""
    wanted = args.peers.split(",")
    unknown = sorted(set(wanted) - set(PEERS))
    if unknown:
        raise SystemExit(f"bench_peers: unknown peer(s) {', '.join(unknown)}; choose from {', '.join(PEERS)}")
    lanes, notes = {}, []
    for name in wanted:
        if name == "dgl" and not Path(args.dgl_python).is_file():
            notes.append(f"dgl left out: no {args.dgl_python} (build it with tools/test_dgl_lane.sh)")
        else:
            lanes[name] = WorkerLane(args.dgl_python, args.threads) if name == "dgl" else PeerState(name)
    try:
        import torch_geometric  # noqa: F401
    except ImportError:
        notes.append(
            "pyg: torch_geometric is not installed; the kernel is dsgraph's torch reference and no training step runs"
        )
    return lanes, notes


# --- rounds, figures, tables ---------------------------------------------------------------------
def run_rounds(lanes: dict, setup: dict, op: str, rounds: int, warmup: int) -> dict:
    """Sets every lane up (``setup``), then ``rounds`` rounds of ``op``, the lanes taking turns
    (each with ``warmup`` untimed ones first).
    Returns {peer: {"setup": answer, "runs": [answers]}}; a peer that runs out of memory stops."""
    results = {name: {"setup": lane.handle(setup), "runs": []} for name, lane in lanes.items()}
    for _ in range(rounds):
        for name, lane in lanes.items():
            if not results[name]["setup"]["oom"] and not any(r["oom"] for r in results[name]["runs"]):
                results[name]["runs"].append(lane.handle({"op": op, "warmup": warmup}))
    for lane in lanes.values():
        lane.handle({"op": "release"})
    return results


def summarise(results: dict, keys: tuple[str, ...]) -> dict:
    """{peer: {key_min, key_med (seconds), peak_mb, oom}} from run_rounds' answers."""
    out = {}
    for name, r in results.items():
        runs = [x for x in r["runs"] if not x["oom"]]
        failed = r["setup"]["oom"] or len(runs) < len(r["runs"]) or not runs
        row = {
            "oom": failed,
            "error": r["setup"].get("error") or next((x.get("error") for x in r["runs"] if x["oom"]), None),
        }
        if not failed:
            for key in keys:
                row[key + "_min"], row[key + "_med"] = (
                    min(x[key] for x in runs),
                    statistics.median(x[key] for x in runs),
                )
            peaks = [x["peak"] for x in runs if x["peak"] is not None]
            row["peak_mb"] = max(peaks) / 2**20 if peaks else None
            row["loss"] = runs[-1].get("loss")
        out[name] = row
    return out


def kernel_bench(lanes: dict, spec: str, args: argparse.Namespace, copy_gbs: float) -> dict:
    from tools.benchmarks.bench_kernels import model_bytes

    use = _without_pyg_above(lanes, spec, args)
    setup = {"op": "kernel_setup", "graph": spec, "heads": args.heads, "dim": args.dim}
    results = run_rounds(use, setup, "kernel_time", args.repeats, args.turn_warmup)
    rows = summarise(results, ("fwd", "bwd"))
    info = next(r["setup"] for r in results.values() if "edges" in r["setup"])
    fwd_bytes, _ = model_bytes(info["nodes"], info["edges"], args.heads, args.dim, 4)
    ds = rows.get("dsgraph")
    for row in rows.values():
        if not row["oom"]:
            row["total_min"] = row["fwd_min"] + row["bwd_min"]
    extra = {}
    if ds and not ds["oom"]:
        extra = {
            "dsgraph_bwd_over_fwd": ds["bwd_min"] / ds["fwd_min"],
            "dsgraph_fwd_gbs": fwd_bytes / ds["fwd_min"] / 1e9,
        }
        extra["dsgraph_fwd_share_of_copy"] = extra["dsgraph_fwd_gbs"] / copy_gbs
        for row in rows.values():
            row["dsgraph_speedup"] = None if row["oom"] else row["total_min"] / ds["total_min"]
    left_out = [] if use is lanes else ["pyg left out: the graph has >= --pyg-max-edges edges"]
    return {"graph": spec, **info, "peers": rows, **extra, "notes": left_out}


def _without_pyg_above(lanes: dict, spec: str, args: argparse.Namespace) -> dict:
    """The lanes, less PyG on a graph of --pyg-max-edges edges or more (counted without self loops)."""
    from dsgraph.graph.datasets import cached_dataset
    from dsgraph.graph.npz import load_npz

    if "pyg" not in lanes or load_npz(cached_dataset(spec)).num_edges < args.pyg_max_edges:
        return lanes
    return {n: lane for n, lane in lanes.items() if n != "pyg"}


def train_bench(lanes: dict, spec: str, args: argparse.Namespace) -> dict:
    setup = {"op": "train_setup", "graph": spec, "hidden": args.hidden, "heads": args.heads, "layers": args.layers}
    use = _without_pyg_above(lanes, spec, args)
    results = run_rounds(use, setup, "train_step", args.steps, args.turn_warmup)
    rows = summarise(results, ("step",))
    info = next(r["setup"] for r in results.values() if "edges" in r["setup"])
    ds = rows.get("dsgraph")
    for row in rows.values():
        row["dsgraph_speedup"] = None if row["oom"] or not ds or ds["oom"] else row["step_min"] / ds["step_min"]
    left_out = [] if use is lanes else ["pyg left out: the graph has >= --pyg-max-edges edges"]
    return {"graph": spec, **info, "peers": rows, "notes": left_out}


def _ms(row: dict, key: str) -> str:
    return f"{row[key + '_min'] * 1e3:,.0f} / {row[key + '_med'] * 1e3:,.0f}"


def _opt(value, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def kernel_table(rec: dict, args: argparse.Namespace) -> str:
    lines = [f"\n## kernels, {rec['graph']}: N={rec['nodes']:,} E={rec['edges']:,} H={args.heads} D={args.dim} fp32"]
    lines += [f"# {note}" for note in rec["notes"]]
    lines += [
        "| peer | fwd ms (min / med) | bwd ms (min / med) | fwd+bwd ms (min) | peak extra MB | dsgraph speedup |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in rec["peers"].items():
        if row["oom"]:
            lines.append(f"| {name} | out of memory | | | | |")
            continue
        lines.append(
            f"| {name} | {_ms(row, 'fwd')} | {_ms(row, 'bwd')} | {row['total_min'] * 1e3:,.0f} "
            f"| {_opt(row['peak_mb'], ',.0f')} "
            f"| {_opt(row.get('dsgraph_speedup'), '.2f')}x |"
        )
    if "dsgraph_bwd_over_fwd" in rec:
        lines.append(
            f"dsgraph: backward / forward {rec['dsgraph_bwd_over_fwd']:.2f}; forward {rec['dsgraph_fwd_gbs']:.1f} GB/s "
            f"(no-reuse model) = {rec['dsgraph_fwd_share_of_copy']:.0%} of the copy bandwidth"
        )
    return "\n".join(lines)


def train_table(rec: dict, args: argparse.Namespace) -> str:
    lines = [
        f"\n## training step, {rec['graph']} with self loops: N={rec['nodes']:,} E={rec['edges']:,} hidden "
        f"{args.hidden}, "
        f"{args.heads} heads, {args.layers} layers, fp32",
        "| peer | step ms (min / med) | peak extra MB | loss | dsgraph speedup |",
        "|---|---|---|---|---|",
    ]
    lines[1:1] = [f"# {note}" for note in rec["notes"]]
    for name, row in rec["peers"].items():
        if row["oom"]:
            lines.append(f"| {name} | out of memory | | | |")
            continue
        lines.append(
            f"| {name} | {_ms(row, 'step')} | {_opt(row['peak_mb'], ',.0f')} | {row['loss']:.4f} "
            f"| {_opt(row['dsgraph_speedup'], '.2f')}x |"
        )
    return "\n".join(lines)


def plot(path: str, kernels: list[dict], trains: list[dict]) -> str:
    """A bar chart of min fwd+bwd and step times per peer (log scale); returns a line to print."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "# no plot: matplotlib is not installed"
    groups = [(f"kernels {r['graph']}", r, "total_min") for r in kernels] + [
        (f"step {r['graph']}", r, "step_min") for r in trains
    ]
    fig, ax = plt.subplots(figsize=(2.2 * len(groups) + 2, 4))
    for p, peer in enumerate(PEERS):
        xs = [g for g, (_, r, key) in enumerate(groups) if not r["peers"].get(peer, {"oom": True})["oom"]]
        ax.bar(
            [x + 0.27 * (p - 1) for x in xs],
            [groups[x][1]["peers"][peer][groups[x][2]] * 1e3 for x in xs],
            0.27,
            label=peer,
        )
    ax.set_xticks(range(len(groups)), [g[0] for g in groups])
    ax.set_yscale("log")
    ax.set_ylabel("ms (min; log scale)")
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    return f"# plot written to {path}"


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        return worker_main(args.threads)
    if args.threads:
        torch.set_num_threads(args.threads)
    from tools.benchmarks.bench_kernels import copy_bandwidth_gbs

    copy_gbs = copy_bandwidth_gbs(torch.device("cpu"))
    lanes, notes = open_lanes(args)
    from dsgraph.ops.cpu.huge_pages import TORCH_SWITCH

    thp = os.environ.get(TORCH_SWITCH)
    print(
        f"# bench_peers: {', '.join(lanes)}; {torch.get_num_threads()} threads; {TORCH_SWITCH}={thp}; copy bandwidth "
        f"{copy_gbs:.1f} GB/s; "
        f"min / median of {args.repeats} kernel rounds and {args.steps} steps, peers alternating, "
        f"{args.turn_warmup} untimed before each timed one"
    )
    print("\n".join(f"# {n}" for n in notes))
    payload = {
        "format": "dsgraph-bench-peers",
        "thp_mem_alloc_enable": thp,
        "turn_warmup": args.turn_warmup,
        "copy_gbs": copy_gbs,
        "threads": torch.get_num_threads(),
        "notes": notes,
        "kernels": [],
        "train": [],
    }
    for spec in args.graph or ["rmat:16"]:
        payload["kernels"].append(kernel_bench(lanes, spec, args, copy_gbs))
        print(kernel_table(payload["kernels"][-1], args), flush=True)
        write_json(args.json_out, payload)
    train_lanes = {n: lane for n, lane in lanes.items() if n != "pyg" or not any("torch_geometric" in x for x in notes)}
    for spec in [s for s in args.train_graph or ["rmat:16"] if s != "none"]:
        payload["train"].append(train_bench(train_lanes, spec, args))
        print(train_table(payload["train"][-1], args), flush=True)
        write_json(args.json_out, payload)
    if args.plot:
        print(plot(args.plot, payload["kernels"], payload["train"]))
    for lane in lanes.values():
        if isinstance(lane, WorkerLane):
            lane.close()


if __name__ == "__main__":
    main()
