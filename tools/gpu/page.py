"""The dated page of a GPU check run: ``python -m tools.gpu.results --page OUT_DIR`` (OUT_DIR holds what
tools/gpu/check.sh left in $OUT: gpu_results.json, and agp_profile_cuda_bf16.json if the profile ran).

It writes docs/benchmarks/DATE-gpu-check.md (DATE from the results' "created", the run's day) with the
machine and versions, the command, every step's verdict and time, the kernels against the HBM
roofline (CUDA-event timing), the speedups over PyG-style, the model step times, the bf16 training
per run against the CPU's losses, and the sanitizers' verdicts; the AGP GPU profile is copied to
docs/agp/DATE-h200_bf16_profile.json and linked; the page goes into mkdocs.yml's Benchmarks list.
A rehearsal's results (CPU counterparts of the steps) are refused: they are no GPU figures.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

COMMAND = 'bash tools/gpu/check.sh   # the device tool: carry [".gpu_pack"], timeout_s 600'


def _cell(value, fmt: str = "") -> str:
    return "-" if value is None else format(value, fmt)


def environment_lines(env: dict | None) -> list[str]:
    env = env or {}
    gpu = env.get("gpu") or "; ".join(env.get("nvidia_smi") or []) or "unknown GPU"
    versions = ", ".join(
        f"{k} {env[k]}" for k in ("python", "torch", "cuda", "cupy", "numba", "numpy", "deepspeed") if env.get(k)
    )
    return [
        f"- **Machine**: {gpu} ({env.get('gpus', '?')} GPU); {versions}.",
        f"- torch's stream has `__cuda_stream__`: {env.get('torch_stream_has_cuda_stream', 'not recorded')}.",
    ]


def steps_table(checks: dict) -> list[str]:
    lines = ["| step | verdict | exit | seconds | detail |", "| --- | --- | --- | --- | --- |"]
    for name, c in checks.items():
        detail = c.get("detail", "").replace("|", "/").replace("\n", " ")[:160]
        verdict = c["status"] + (" (optional)" if c.get("optional") else "")
        lines.append(
            f"| `{name}` | {verdict} | {c.get('exit_code', '-')} | {_cell(c.get('seconds'), '.0f')} | {detail} |"
        )
    return lines


def kernel_lines(kernels: dict) -> list[str]:
    lines = []
    roof = kernels.get("fwd_roofline_bf16_50M")
    if roof:
        lines.append(
            f"Forward, bf16, {roof['graph']} ({roof['nodes']:,} nodes, {roof['edges']:,} edges, H = 8, D = 16): "
            f"{roof['fwd_ms']:.2f} ms, {roof['fwd_roofline']:.1%} of the no-reuse HBM roofline at "
            f"{roof['peak_gbs']:,.0f} GB/s (the copy bandwidth measured in the same run; CUDA-event timing)."
        )
    else:
        lines.append("No forward on a graph of 50M edges or more was measured (see the steps above).")
    rows = kernels.get("fwd_bwd_speedup_vs_pyg") or []
    if rows:
        lines += [
            "",
            "| graph | edges | dtype | cuda fwd+bwd ms | PyG-style fwd+bwd ms | speedup over PyG-style |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for s in rows:
            speedup = f"{s['speedup_vs_pyg']:.1f}x" if s.get("speedup_vs_pyg") else s.get("pyg", "-")
            lines.append(
                f"| {s['graph']} | {s['edges']:,} | {s['dtype']} | {s['cuda_fwd_bwd_ms']:.2f} | "
                f"{_cell(s.get('pyg_fwd_bwd_ms'), '.2f')} | {speedup} |"
            )
    return lines


def training_lines(rows: list[dict]) -> list[str]:
    lines = [
        "| run | verdict | largest relative loss difference | seconds | reason |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r.get('status')} | {_cell(r.get('max_rel_diff'), '.2e')} | "
            f"{_cell(r.get('seconds'), '.1f')} | {(r.get('reason') or '').replace('|', '/')[:120]} |"
        )
    return lines


def page_text(report: dict, date: str, profile_link: str | None) -> str:
    checks, figures = report.get("checks", {}), report.get("figures", {})
    out = [
        f"# {date}: the GPU check",
        "",
        *environment_lines(report.get("environment")),
        f"- **Verdict**: {'PASSED' if report.get('passed') else 'FAILED'} (mandatory steps; optional ones are marked).",
        "- How the check runs and its budget: [The GPU check](../gpu-check.md).",
        "",
        "```bash",
        COMMAND,
        "```",
        "",
        "## Steps",
        "",
        *steps_table(checks),
        "",
        "## Kernels against the HBM roofline",
        "",
        *kernel_lines(figures.get("kernels") or {}),
        "",
        "## The figures of docs/GPU.md",
        "",
        report.get("table", ""),
        "",
        "## bf16 training per strategy against the CPU's losses",
        "",
        *training_lines(figures.get("training") or []),
        "",
        "## Sanitizers",
        "",
    ]
    for tool in ("memcheck", "racecheck"):
        c = checks.get(tool, {"status": "not run", "detail": ""})
        out.append(f"- `{tool}`: {c['status']}: {c['detail'][:300]}")
    out += ["", "## AGP GPU profile", ""]
    out.append(
        f"Saved as [{profile_link}](../agp/{profile_link})." if profile_link else "The profile step wrote no profile."
    )
    return "\n".join(out) + "\n"


def add_to_nav(mkdocs: Path, entry: str) -> None:
    """Puts ``entry`` under the Benchmarks overview in mkdocs.yml's nav (once)."""
    text = mkdocs.read_text()
    anchor = "      - Overview: benchmarks/index.md\n"
    if entry not in text and anchor in text:
        mkdocs.write_text(text.replace(anchor, anchor + f"      - {entry}\n", 1))


def write_page(out_dir: Path, docs: Path) -> Path:
    """Writes the dated page (and the profile) from ``out_dir``; returns the page's path."""
    path = out_dir / "gpu_results.json"
    if not path.is_file():
        raise SystemExit(f"gpu_results: {path}: no results file (the check writes it into $OUT)")
    report = json.loads(path.read_text())
    if report.get("rehearsal") or report.get("minimal"):
        kind = "a CPU rehearsal" if report.get("rehearsal") else "a minimal verdict"
        raise SystemExit(f"gpu_results: {path} is {kind}, not a GPU run's figures: no page")
    date = (report.get("created") or "")[:10]
    if len(date) != 10:
        raise SystemExit(f"gpu_results: {path} has no 'created' date")
    profile_link = None
    if (out_dir / "agp_profile_cuda_bf16.json").is_file():
        profile_link = f"{date}-h200_bf16_profile.json"
        shutil.copyfile(out_dir / "agp_profile_cuda_bf16.json", docs / "agp" / profile_link)
    page = docs / "benchmarks" / f"{date}-gpu-check.md"
    page.write_text(page_text(report, date, profile_link))
    mkdocs = docs.parent / "mkdocs.yml"
    if mkdocs.is_file():
        add_to_nav(mkdocs, f"{date} The GPU check: benchmarks/{page.name}")
    return page
