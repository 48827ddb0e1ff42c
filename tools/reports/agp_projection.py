"""Projects per-iteration time and per-rank memory of GP-AG, GP-A2A and GP-Halo on an 8-GPU
NVLink system for ogbn-products-sized and ogbn-papers100M-sized graphs, p = 1..8.

    python -m tools.reports.agp_projection --out-dir docs/agp
    python -m tools.reports.agp_projection --out-dir docs/agp --profiles-only   # only the two profile JSONs

The system profile is written from published figures, not measured (no such machine here); every
figure and assumption is listed in ``FIGURES`` and copied into the profile's system description.
Two profiles are written: dgx_h100_8gpu_profile.json (fp32, the projection below) and
dgx_h100_8gpu_bf16_profile.json (bf16, for bf16 GPU configs and as the collective fits that
``dsgraph profile --backend cuda --collectives-from`` merges into a one-GPU measurement):

- NVIDIA H100 SXM5: 80 GB HBM3 at about 3.35 TB/s; 67 TFLOPS FP32 without tensor cores, about
  989 TFLOPS dense BF16 on tensor cores.
- NVLink 4 through NVSwitch in a DGX H100: 900 GB/s per GPU in both directions together (450 GB/s
  each way); NCCL's all-gather and reduce-scatter reach a bus bandwidth of about 360 GB/s on 8 GPUs
  for large messages, and a small-message latency of some tens of microseconds.
- Assumptions (not published): all-to-all reaches half the all-gather bus bandwidth; the fused
  attention kernel moves ~3.5 x 2 x D x b bytes per edge-head (forward plus backward; b = 4 in fp32,
  2 in bf16) at 40% of HBM bandwidth; dense layers run at 60% of the FP32 (or BF16 tensor-core) peak;
  the METIS halo is 10% of the remote nodes. Collective fits are per byte, the same in both dtypes.

Both profiles carry a ``hierarchy`` (nodes of 8 GPUs; ``dsgraph/agp/tiers.py``) so that ``dsgraph
plan`` composes any number of such nodes: the intra-node tier is the fits above; the inter-node tier
is one of the eight 400 Gb/s ConnectX-7 InfiniBand NDR adapters of a DGX H100 (one per GPU, "rails"):
50 GB/s per direction, assumed at 90% of line rate (45 GB/s) with 10 us per message, fitted at
256 KiB..64 GiB (``LINK_FIT_EXPS``). Every tier is labelled "projected" with these sources
(docs/agp/plans.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from dsgraph.agp.model import GraphShape, ModelShape, predict, strategy_names
from dsgraph.agp.synthetic import linear_fit, linear_profile
from dsgraph.agp.tiers import Hierarchy, InterTier, Tier

FIGURES = {
    "hbm_bytes_per_s": 3.35e12,
    "hbm_capacity_bytes": 80e9,
    "fp32_flops": 67e12,
    "bf16_tensor_flops": 989e12,
    "nvlink_bytes_per_s_per_direction": 450e9,
    "nccl_all_gather_bus_bytes_per_s": 360e9,
    "all_to_all_fraction_of_all_gather": 0.5,
    "collective_latency_s": 3e-5,
    "attention_hbm_efficiency": 0.4,
    "dense_flops_efficiency": 0.6,
    "halo_fraction": 0.1,
}
INTER_FIGURES = {
    "links_per_node": 8,
    "link_line_rate_bytes_per_s": 400e9 / 8,
    "link_efficiency": 0.9,
    "link_latency_s": 1e-5,
}
LINK_FIT_EXPS = (18, 36)
"""The inter-node link's fit is sampled at 256 KiB..64 GiB, where its latency (10 us ~ 450 KB at 45 GB/s)
no longer dominates: the messages that cross nodes in a papers100M-sized plan are 0.1-3 GB, and a
log-log line through 1 KiB..16 GiB (the intra fits' range) under-predicts those 1.5-3x."""
SOURCES = {
    "compute": "NVIDIA H100 Tensor Core GPU datasheet "
    "(SXM5: 80 GB HBM3 at 3.35 TB/s, 67 TFLOPS FP32, 989 TFLOPS dense BF16); "
    "kernel and dense-layer efficiencies assumed (tools/agp_projection.py)",
    "intra": "NVIDIA H100 datasheet and DGX H100 user guide "
    "(NVLink 4 via NVSwitch, 900 GB/s per GPU, 450 GB/s per direction); "
    "NCCL all-gather bus bandwidth ~360 GB/s on 8 GPUs (nccl-tests doc/PERFORMANCE.md defines busbw); "
    "all-to-all at half of it assumed",
    "inter": "NVIDIA DGX H100 user guide "
    "(eight ConnectX-7 adapters for the compute fabric, one per GPU, 400 Gb/s InfiniBand NDR each); "
    "90% of line rate and 10 us per message assumed",
}
HEAD_DIM, HEADS = 16, 8
GRAPHS = {
    "ogbn-products-sized": dict(nodes=2_449_029, edges=61_859_140, in_dim=100, classes=47),
    "ogbn-papers100M-sized": dict(nodes=111_059_956, edges=1_615_685_872, in_dim=128, classes=172),
}
MODEL = dict(layers=3, hidden=128, heads=HEADS, ffn_mult=2)


DTYPE_COSTS = {"float32": (4, "fp32_flops"), "bfloat16": (2, "bf16_tensor_flops")}  # element bytes, peak figure
PROFILE_FILES = {"float32": "dgx_h100_8gpu_profile.json", "bfloat16": "dgx_h100_8gpu_bf16_profile.json"}


def dgx_h100_profile(dtype: str = "float32"):
    """The projected 8 x H100 profile for activations in ``dtype`` (float32 or bfloat16)."""
    f = FIGURES
    elem_bytes, peak = DTYPE_COSTS[dtype]
    busbw = f["nccl_all_gather_bus_bytes_per_s"]
    a2a_bw = busbw * f["all_to_all_fraction_of_all_gather"]
    per_byte = {
        "all_gather": 1 / busbw,
        "reduce_scatter": 1 / busbw,
        "all_to_all": 1 / a2a_bw,
        "all_to_all_uneven": 1 / a2a_bw,
    }

    def scale(c, p):  # x = bytes per rank: all-gather/reduce-scatter move (p-1) x, all-to-all (p-1)/p x
        return (p - 1) if c in ("all_gather", "reduce_scatter") else (p - 1) / p

    profile = linear_profile(
        max_ranks=8,
        attention_s_per_edge_head=3.5
        * 2
        * HEAD_DIM
        * elem_bytes
        / (f["hbm_bytes_per_s"] * f["attention_hbm_efficiency"]),
        rest_s_per_mac=6 / (f[peak] * f["dense_flops_efficiency"]),
        collective_s_per_byte=per_byte,
        collective_latency_s=f["collective_latency_s"],
        backend="cuda",
        dtype=dtype,
        heads=HEADS,
        head_dim=HEAD_DIM,
        system={
            "description": f"DGX H100 (8 x H100 SXM5 80 GB, NVLink 4 / NVSwitch), {dtype}, "
            "projected from published figures",
            "device": "cuda",
            "memory_capacity_bytes": f["hbm_capacity_bytes"],
            "memory_shared_by_ranks": False,
            "figures": FIGURES,
            "source": "tools/reports/agp_projection.py (published figures and stated assumptions; not measured)",
        },
        bandwidth_scale=scale,
    )
    return dataclasses.replace(profile, hierarchy=dgx_h100_hierarchy())


def dgx_h100_hierarchy() -> Hierarchy:
    """Nodes of 8 H100s: the intra tier is the profile's fits, the inter tier one NDR link per GPU."""
    f = INTER_FIGURES
    bandwidth = f["link_line_rate_bytes_per_s"] * f["link_efficiency"]
    intra_figures = {
        k: FIGURES[k]
        for k in (
            "nvlink_bytes_per_s_per_direction",
            "nccl_all_gather_bus_bytes_per_s",
            "all_to_all_fraction_of_all_gather",
            "collective_latency_s",
        )
    }
    return Hierarchy(
        ranks_per_node=8,
        compute=Tier(
            "H100 SXM5 80 GB",
            "projected",
            SOURCES["compute"],
            {
                k: FIGURES[k]
                for k in (
                    "hbm_bytes_per_s",
                    "fp32_flops",
                    "bf16_tensor_flops",
                    "attention_hbm_efficiency",
                    "dense_flops_efficiency",
                )
            },
        ),
        intra=Tier("NVLink 4 via NVSwitch (DGX H100)", "projected", SOURCES["intra"], intra_figures),
        inter=InterTier(
            "InfiniBand NDR, 8 x 400 Gb/s ConnectX-7 per node (one per GPU)",
            "projected",
            SOURCES["inter"],
            dict(f),
            links_per_node=f["links_per_node"],
            link=linear_fit(1 / bandwidth, f["link_latency_s"], *LINK_FIT_EXPS),
        ),
    )


def project(profile) -> list[dict]:
    rows = []
    for name, g in GRAPHS.items():
        shape = GraphShape.from_counts(g["nodes"], g["edges"] + g["nodes"], range(1, 9), FIGURES["halo_fraction"])
        model = ModelShape(in_dim=g["in_dim"], num_classes=g["classes"], **MODEL)
        for p in range(1, 9):
            for s in strategy_names():
                x = predict(s, p, shape, model, profile)
                rows.append({"graph": name, **x.as_dict()})
    return rows


def _time_cell(r: dict) -> str:
    """A strategy's time: plain if it fits, in parentheses with an x if not, x if it cannot run."""
    return f"{r['time_s']:.3f}" if r["feasible"] else f"({r['time_s']:.3f}) x" if r["time_s"] != float("inf") else "x"


def _memory_cell(r: dict) -> str:
    return f"{r['memory_bytes'] / 2**30:.1f}" if r["memory_bytes"] == r["memory_bytes"] else "-"


def markdown(rows) -> str:
    lines = [
        f"Model: L={MODEL['layers']}, d={MODEL['hidden']}, H={MODEL['heads']}, FFN x{MODEL['ffn_mult']}, fp32; "
        f"one iteration = full-graph forward + backward + gradient sync. Memory capacity 80 GB per GPU.",
        "",
        "| graph | p | ag s | a2a s | halo s | ag GiB | a2a GiB | halo GiB | pick |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for graph in GRAPHS:
        for p in range(1, 9):
            at = {r["strategy"]: r for r in rows if r["graph"] == graph and r["p"] == p}
            times = " | ".join(_time_cell(at[s]) for s in ("ag", "a2a", "halo"))
            memories = " | ".join(_memory_cell(at[s]) for s in ("ag", "a2a", "halo"))
            feasible = [r for r in at.values() if r["feasible"]]
            pick = min(feasible, key=lambda r: r["time_s"])["strategy"] if feasible else "none fits"
            lines.append(f"| {graph} | {p} | {times} | {memories} | {pick} |")
    lines.append("")
    lines.append(
        "x: infeasible (memory over 80 GB per GPU, or H % p != 0 for a2a); a time in parentheses is what it would take."
    )
    return "\n".join(lines) + "\n"


def plot(rows, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"ag": "tab:blue", "a2a": "tab:orange", "halo": "tab:green"}
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for col, graph in enumerate(GRAPHS):
        for s in strategy_names():
            sel = [r for r in rows if r["graph"] == graph and r["strategy"] == s and r["time_s"] != float("inf")]
            ps = [r["p"] for r in sel]
            axes[0, col].plot(ps, [r["time_s"] for r in sel], "o-", c=colours[s], label=s, alpha=0.8)
            for r in sel:
                if not r["feasible"]:
                    axes[0, col].plot(r["p"], r["time_s"], "x", c="k", ms=9)
            axes[1, col].plot(ps, [r["memory_bytes"] / 2**30 for r in sel], "o-", c=colours[s], label=s, alpha=0.8)
        axes[1, col].axhline(80e9 / 2**30, c="r", ls="--", lw=1, label="80 GB")
        axes[0, col].set_title(f"{graph}: time per iteration (x: infeasible)")
        axes[0, col].set_yscale("log"), axes[1, col].set_yscale("log")
        axes[0, col].set_ylabel("s"), axes[1, col].set_ylabel("GiB per GPU"), axes[1, col].set_xlabel("GPUs p")
        axes[0, col].legend(fontsize=8), axes[1, col].legend(fontsize=8)
    fig.suptitle("AGP projection on 8 x H100 (NVLink), from published figures")
    fig.tight_layout(), fig.savefig(path, dpi=110), plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out-dir", default="docs/agp", help="folder for the profile JSONs, projection.md and projection.png"
    )
    ap.add_argument("--profiles-only", action="store_true", help="write only the fp32 and bf16 profile JSONs")
    args = ap.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    for dtype, name in PROFILE_FILES.items():
        dgx_h100_profile(dtype).save(os.path.join(args.out_dir, name))
    print(f"wrote {', '.join(os.path.join(args.out_dir, n) for n in PROFILE_FILES.values())}")
    if args.profiles_only:
        return 0
    profile = dgx_h100_profile("float32")
    rows = project(profile)
    text = markdown(rows)
    with open(os.path.join(args.out_dir, "projection.md"), "w") as f:
        f.write(text)
    plot(rows, os.path.join(args.out_dir, "projection.png"))
    print(text)
    print(f"wrote {args.out_dir}/projection.md, projection.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
