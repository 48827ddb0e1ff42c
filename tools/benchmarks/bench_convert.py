"""Time and peak memory of ``dsgraph convert`` on a large generated edge list.

Writes an R-MAT edge list (2^SCALE nodes, EDGES edges, whitespace separated, a comment and a
header line) to a temporary folder, then runs ``python -m dsgraph convert`` on it in a child process
once per option set and prints a table: wall time, the child's peak RSS, the RSS of a child that
only imports the same modules (the interpreter, numpy and torch), and the size of the final arrays
(those in the output .npz; also the in-memory CSR Graph).

    .venv/bin/python -m tools.benchmarks.bench_convert                     # 16M edges, 2^20 nodes
    .venv/bin/python -m tools.benchmarks.bench_convert --edges 1000000 --keep /tmp/bench
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np

OPTION_SETS = {
    "plain": [],
    "sym+dedup+loops": ["--symmetrize", "--dedup", "--drop-self-loops"],
    "relabel (sparse ids)": ["--relabel"],
}
BASELINE = "import dsgraph.graph.convert, numpy, torch"


def write_rmat_edge_list(
    path: str, scale: int, edges: int, sparse_ids: bool, seed: int = 0, chunk: int = 1 << 21
) -> None:
    """R-MAT (a=.57, b=.19, c=.19) edges, written chunk by chunk; ``sparse_ids`` spreads ids as
    7 * id + 1000003 so that only --relabel makes them contiguous."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        f.write("# R-MAT edge list written by tools/benchmarks/bench_convert.py\nsource target\n")
        for start in range(0, edges, chunk):
            m = min(chunk, edges - start)
            src = np.zeros(m, dtype=np.int64)
            dst = np.zeros(m, dtype=np.int64)
            for bit in range(scale):
                r = rng.random(m)
                src |= (r >= 0.76).astype(np.int64) << bit  # quadrants c and d set the source bit
                dst |= (((r >= 0.57) & (r < 0.76)) | (r >= 0.95)).astype(np.int64) << bit  # b and d
            if sparse_ids:
                src, dst = src * 7 + 1000003, dst * 7 + 1000003
            pairs = np.stack([src, dst], axis=1)
            f.write("\n".join(f"{u} {v}" for u, v in pairs.tolist()))
            f.write("\n")


def run_measured(cmd: list[str]) -> tuple[float, float, str]:
    """Runs ``cmd`` through a small wrapper that reports the child's own peak RSS (ru_maxrss)."""
    wrapper = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "wall = time.perf_counter() - t\n"
        "sys.stderr.write(p.stderr)\n"
        "sys.stdout.write(p.stdout)\n"
        "print(f'@@ {wall} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}')\n"
        "sys.exit(p.returncode)\n"
    )
    proc = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    lines = proc.stdout.rstrip("\n").split("\n")
    _, wall, peak_kb = lines[-1].split()
    return float(wall), int(peak_kb) / 1024, "\n".join(lines[:-1])


def npz_array_mb(path: str) -> float:
    """Uncompressed size of the arrays in an .npz (headers included), in MB."""
    with zipfile.ZipFile(path) as archive:
        return sum(info.file_size for info in archive.infolist()) / 2**20


def graph_array_mb(num_nodes: int, num_edges: int, num_features: int) -> float:
    """rowptr int64 + col int32 + x float32 + y int64 + 3 bool masks, in MB."""
    return (8 * (num_nodes + 1) + 4 * num_edges + 4 * num_nodes * num_features + 8 * num_nodes + 3 * num_nodes) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=20, help="2^SCALE node ids (default: 20)")
    parser.add_argument("--edges", type=int, default=16_000_000, help="number of edges (default: 16,000,000)")
    parser.add_argument("--sets", nargs="+", choices=OPTION_SETS, default=list(OPTION_SETS), help="option sets to run")
    parser.add_argument("--keep", metavar="DIR", help="write the files to DIR and keep them (default: a temp folder)")
    args = parser.parse_args(argv)
    folder = args.keep or tempfile.mkdtemp(prefix="dsgraph-bench-convert-")
    os.makedirs(folder, exist_ok=True)

    _, base_mb, _ = run_measured([sys.executable, "-c", BASELINE])
    rows = []
    for name in args.sets:
        sparse = name.startswith("relabel")
        text = os.path.join(folder, f"rmat{args.scale}_{args.edges}{'_sparse' if sparse else ''}.txt")
        if not os.path.exists(text):
            began = time.perf_counter()
            write_rmat_edge_list(text, args.scale, args.edges, sparse_ids=sparse)
            print(
                f"wrote {text} ({os.path.getsize(text) / 2**20:.0f} MB) in {time.perf_counter() - began:.1f}s",
                flush=True,
            )
        out = os.path.join(folder, f"out_{len(rows)}.npz")
        cmd = [sys.executable, "-m", "dsgraph", "convert", text, out, "--force", *OPTION_SETS[name]]
        wall, peak_mb, stdout = run_measured(cmd)
        nodes = int(next(s for s in stdout.splitlines() if s.strip().startswith("nodes")).split()[1].replace(",", ""))
        edges = int(next(s for s in stdout.splitlines() if s.strip().startswith("edges")).split()[1].replace(",", ""))
        rows.append(
            (
                name,
                os.path.getsize(text) / 2**20,
                nodes,
                edges,
                wall,
                peak_mb,
                npz_array_mb(out),
                graph_array_mb(nodes, edges, 1),
            )
        )
        print(f"{name}: done in {wall:.1f}s", flush=True)
        if not args.keep:
            os.remove(out)

    print(f"\nbaseline RSS (python + numpy + torch + dsgraph imports): {base_mb:.0f} MB")
    header = (
        f"{'options':<22} {'text MB':>8} {'nodes':>10} {'edges':>11} {'time s':>7} {'peak RSS MB':>11} "
        f"{'npz arrays MB':>13} {'peak/npz':>8} {'(peak-base)/npz':>15} {'CSR Graph MB':>12}"
    )
    print(header)
    for name, text_mb, nodes, edges, wall, peak, npz_mb, graph_mb in rows:
        print(
            f"{name:<22} {text_mb:>8.0f} {nodes:>10,} {edges:>11,} {wall:>7.1f} {peak:>11.0f} {npz_mb:>13.0f} "
            f"{peak / npz_mb:>8.2f} {(peak - base_mb) / npz_mb:>15.2f} {graph_mb:>12.0f}"
        )
    if not args.keep:
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
        os.rmdir(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
