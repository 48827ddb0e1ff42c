"""The plans table of docs/agp/plans.md: papers100M, ogbn-products and an R-MAT graph of 2^28 nodes
on 8, 16, 32 and 64 H100s in nodes of 8, each row one `dsgraph plan` command (printed with it).

    python -m tools.reports.agp_plans               # prints the markdown table and the commands
    python -m tools.reports.agp_plans --out docs/agp/plans_table.md

Every row runs `dsgraph plan` itself (``dsgraph.cli.main`` with ``--json``), so the table is what the
printed commands give. All inputs are projected (the profile) or assumed (halo fractions); the
R-MAT halo fractions were measured with METIS on rmat:16 (node-then-rank, ``RMAT_HALO``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile

from dsgraph.cli import main as dsgraph_main

PROFILE = "docs/agp/dgx_h100_8gpu_bf16_profile.json"
MODEL = [
    "--layers",
    "3",
    "--hidden",
    "128",
    "--heads",
    "8",
    "--dtype",
    "bfloat16",
    "--block",
    "transformer",
    "--head",
    "linear",
    "--input-projection",
    "--global-attention",
    "none",
    "--checkpoint-every",
    "1",
]
GRAPHS = {
    "ogbn-papers100M": [
        "--nodes",
        "111e6",
        "--edges",
        "1.6e9",
        "--in-dim",
        "128",
        "--classes",
        "172",
        "--halo-fraction",
        "0.05",
    ],
    "ogbn-products": [
        "--nodes",
        "2449029",
        "--edges",
        "61859140",
        "--in-dim",
        "100",
        "--classes",
        "47",
        "--halo-fraction",
        "0.1",
    ],
    "rmat 2^28": ["--nodes", str(2**28), "--edges", str(2**32), "--in-dim", "64", "--classes", "4"],
}
RMAT_HALO = {
    8: ("0.308", None, None),
    16: ("0.225", "0.629", "0.615"),
    32: ("0.181", "0.708", "0.414"),
    64: ("0.112", "0.885", "0.308"),
}
"""Measured on rmat:16 (65,536 nodes, 1.02M edges with self loops), METIS balancing in-edges,
node-then-rank beyond one node: the busiest rank's halo as a fraction of the remote nodes at p ranks,
the share of it on other nodes, and a node's halo as a fraction of the nodes on other nodes
(``python -m tools.reports.agp_plans --measure-rmat``)."""
WORLD_SIZES = (8, 16, 32, 64)


def command(graph: str, world: int) -> list[str]:
    args = ["--profile", PROFILE, "--world-size", str(world), "--ranks-per-node", "8", *GRAPHS[graph], *MODEL]
    if graph.startswith("rmat"):
        halo, share, node = RMAT_HALO[world]
        args += ["--halo-fraction", halo] + (
            ["--cross-node-share", share, "--node-halo-fraction", node] if share else []
        )
    return args


ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def run(args: list[str]) -> tuple[int, dict | None, str]:
    """``dsgraph plan`` with ``args`` (the profile path relative to the repository): (rc, its JSON, its output)."""
    args = [os.path.join(ROOT, a) if a == PROFILE else a for a in args]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        text, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(err):
            rc = dsgraph_main(["plan", *args, "--json", out])
        plan = json.load(open(out)) if rc == 0 else None
    return rc, plan, text.getvalue()


def _cell(x: dict) -> str:
    name = x["strategy"].replace("|", "\\|")  # a2a|halo: the bar escaped in a markdown table
    return f"{name} {x['memory_bytes'] / 2**30:.1f} GiB, {x['time_s']:.2f} s"


def row(graph: str, world: int) -> str:
    rc, plan, text = run(command(graph, world))
    nodes = world // 8
    if plan is None:
        best = [line.strip() for line in text.splitlines() if "does not fit: the smallest" in line]
        why = best[0].split(": the smallest is ")[-1].split(";")[0] if best else "see the command's output"
        return f"| {graph} | {world} ({nodes}) | none fits (smallest: {why}) | | | | | | |"
    pick = plan["pick_at_world_size"]
    t = pick["time_terms"]
    comm = t["collectives"] + t["collectives recompute"] + t["overlap"]
    compute = t["attention"] + t["attention recompute"] + t["copies"]
    fastest = plan["pick"]
    variants = [v for v in plan["variants"] if v["p"] == world and v["feasible"]]
    variant = min(variants, key=lambda v: v["time_s"]) if variants else None
    cross = f"{pick['inter_node_bytes'] / 2**30:.1f}" if nodes > 1 else "-"
    return (
        f"| {graph} | {world} ({nodes}) | **{pick['strategy']}** | {pick['memory_bytes'] / 2**30:.1f} "
        f"| {pick['time_s']:.3f} | "
        f"{compute:.3f} / {comm:.3f} / {t['projections'] + t['gradient sync']:.3f} "
        f"| {cross} | "
        f"{_cell(variant) if variant else '-'} | {fastest['strategy']}@{fastest['p']} |"
    )


def table() -> str:
    lines = [
        "| graph | GPUs (nodes) | pick at that size | GiB per GPU | step (= epoch) s "
        "| attention / collectives / rest s | GiB across nodes per GPU and step | a2a-in-node variant on paper "
        "| fastest over p <= GPUs |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for graph in GRAPHS:
        lines += [row(graph, w) for w in WORLD_SIZES]
    return "\n".join(lines) + "\n"


def commands() -> str:
    lines = []
    for graph in GRAPHS:
        for w in WORLD_SIZES:
            lines.append("dsgraph plan " + " ".join(command(graph, w)))
    return "\n".join(lines) + "\n"


def measure_rmat(scale: int = 16) -> None:
    """Prints the halo fractions of RMAT_HALO, measured with METIS on rmat:SCALE."""
    from dsgraph.agp.hierarchy import node_then_rank_split
    from dsgraph.graph import load_dataset
    from dsgraph.parallel.shapes import GraphShape

    graph = load_dataset(f"rmat:{scale}").with_self_loops()
    n = graph.num_nodes
    flat = GraphShape.from_graph(graph, [8], partition_method="metis").partitions[8]
    print(f"p=8: halo {max(flat.halo_sizes) / (n - n / 8):.3f}")
    for p in WORLD_SIZES[1:]:
        s = node_then_rank_split(graph, p, 8)
        nodes, busiest = p // 8, s.halo_sizes.index(max(s.halo_sizes))
        print(
            f"p={p}: halo {max(s.halo_sizes) / (n - n / p):.3f}, cross-node share "
            f"{s.inter_halo_sizes[busiest] / max(s.halo_sizes):.3f}, "
            f"node halo {max(s.node_halo_sizes) / (n - n / nodes):.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="also write the table to this markdown file")
    ap.add_argument("--measure-rmat", action="store_true", help="measure the R-MAT halo fractions on rmat:16 instead")
    args = ap.parse_args(argv)
    if args.measure_rmat:
        measure_rmat()
        return 0
    text = table()
    print(text)
    print(commands())
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
