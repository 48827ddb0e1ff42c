#!/usr/bin/env python
"""Collects the pieces that tools/gpu/check.sh leaves in its log folder into ONE results file,
gpu_results.json, with a PASSED/FAILED verdict per check and overall, and prints the figures of
docs/GPU.md:

- forward share of the no-reuse HBM roofline in bf16 on the >= 50M-edge graph (bench_kernels);
- forward+backward speedup of the CUDA kernels over PyG-style message passing (bench_kernels);
- the Graph Transformer's step time and peak memory beside PyG's TransformerConv model (bench_models);
- the training losses against the CPU's (gpu_train_check) and the GPU's AGP profile (dsgraph profile).

    python -m tools.gpu.results --log-dir $OUT --work-dir "$WORK"   # the mktemp folder gpu_check.sh made
    python -m tools.gpu.results --environment FILE      # the environment step: GPU and versions

Inputs in --work-dir (they stay off the log folder, which may hand back only 8 files): steps.tsv
(one "name<TAB>exit code<TAB>seconds" line per step; an exit code of "skip" means it was left out
for time), environment.json, and each step's console output NAME.txt (pytest's and
compute-sanitizer's summaries are read from there; its tail goes into the results). In --log-dir:
train_strategies.json, train_rest.json, kernels.json, models_rmat22.json,
agp_profile_cuda_bf16.json. A planned step (--plan) that did not run, or whose piece is missing,
is FAILED with the reason. Whatever goes wrong while the results are made (a surprise in a piece),
a results file is written: a step that cannot be judged is FAILED with the exception, and if the
whole report fails, a minimal verdict ("minimal": true, "passed": false, the reason, the steps'
exit codes) is written instead.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

LARGE_EDGES = 50_000_000
OPTIONAL = ("bench_models_rmat20", "profile")  # reported, but never turn the verdict to FAILED (check.sh --optional)


def read_steps(path: Path) -> dict[str, dict]:
    steps = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) == 3:
                steps[parts[0]] = {"rc": parts[1], "seconds": float(parts[2])}
    return steps


def load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def pytest_counts(log: Path | None) -> dict:
    return pytest_counts_text(log.read_text() if log and log.is_file() else "")


def pytest_counts_text(text: str) -> dict:
    """passed / failed / skipped / errors from pytest's closing line (the last line that counts
    outcomes and ends with the run time)."""
    closing = [
        line
        for line in text.splitlines()
        if re.search(r"\d+ (passed|failed|skipped|errors?|deselected)", line) and re.search(r" in [\d.]+s", line)
    ]
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    for n, what in re.findall(r"(\d+) (passed|failed|skipped|errors?)", closing[-1] if closing else ""):
        counts["errors" if what.startswith("error") else what] += int(n)
    return counts


def large_kernel_record(kernels) -> dict | None:
    """bench_kernels' CUDA bf16 record on the largest graph of >= LARGE_EDGES edges."""
    recs = [
        r
        for r in (kernels or {}).get("records", [])
        if r["backend"] == "cuda" and r["dtype"] == "bf16" and r["edges"] >= LARGE_EDGES
    ]
    return max(recs, key=lambda r: r["edges"]) if recs else None


def profile_ok(path: Path) -> tuple[bool, str]:
    from dsgraph.agp.profile import load_profile

    try:
        prof = load_profile(str(path))
    except Exception as err:  # noqa: BLE001 - a missing or broken profile fails the step
        return False, f"{type(err).__name__}: {err}"
    ok = (
        prof.backend == "cuda"
        and prof.dtype == "bfloat16"
        and prof.max_ranks >= 2
        and "collectives_source" in prof.system
    )
    return ok, f"{prof.backend} {prof.dtype} p=1..{prof.max_ranks}; {prof.system.get('description', '')}"


FULL_PLAN = (
    "install",
    "smoke",
    "environment",
    "memcheck",
    "racecheck",
    "bench_kernels",
    "bench_kernels_rmat22",
    "train_strategies",
    "kernel_tests",
    "train_rest",
    "bench_models_rmat22",
    "profile",
)
TRAIN_FILES = ("train_strategies.json", "train_rest.json")


def sanitizer_ok(text: str, tool: str) -> tuple[bool, str]:
    """compute-sanitizer's summary line says 0 errors (memcheck) or 0 hazards (racecheck), and
    pytest ran the small case without failures or skips."""
    summary = [line.strip("= ") for line in text.splitlines() if "SUMMARY:" in line]
    counts = pytest_counts_text(text)
    clean = bool(summary) and all(re.search(r"SUMMARY: 0 (errors|hazards)", line) for line in summary)
    ok = clean and counts["passed"] > 0 and not (counts["failed"] or counts["skipped"] or counts["errors"])
    return ok, f"{tool}: {'; '.join(summary) or 'no sanitizer summary'}; pytest {json.dumps(counts)}"


def _content(name: str, d: Path, work: Path) -> tuple[bool, str]:
    """Whether a step's output says it passed, and a detail line (the exit code is judged apart)."""
    text = (work / f"{name}.txt").read_text(errors="replace") if (work / f"{name}.txt").is_file() else ""
    if name == "install":
        return True, "deepspeed and its requirements from .gpu_pack/wheels"
    if name == "smoke":
        return "smoke: PASSED" in text, "fp32 and bf16 forward+backward against the reference"
    if name == "environment":
        env = load_json(work / "environment.json")
        return bool(env and env.get("cuda_available") and not env.get("missing")), json.dumps(env)
    if name in ("memcheck", "racecheck"):
        return sanitizer_ok(text, name)
    if name == "kernel_tests":
        tests = pytest_counts_text(text)
        return tests["passed"] > 0 and not (tests["failed"] or tests["skipped"] or tests["errors"]), json.dumps(tests)
    if name.startswith("train_"):
        train = load_json(d / f"{name}.json")
        runs = (train or {}).get("runs", [])
        failed = [
            f"{r['name']}: {r.get('check', {}).get('reason') or r.get('log_tail', '')[-120:]}"
            for r in runs
            if r.get("check", {}).get("status") != "PASSED"
        ]
        return bool(train and train.get("passed")), f"{len(runs) - len(failed)} of {len(runs)} runs passed" + (
            f"; {failed[:4]}" if failed else ""
        )
    kernels = load_json(d / "kernels.json")
    if name == "bench_kernels":
        return any(
            r["backend"] == "cuda" and not r["oom"] for r in (kernels or {}).get("records", [])
        ), "CUDA records in kernels.json"
    if name == "bench_kernels_rmat22":
        big = large_kernel_record(kernels)
        return big is not None and not big["oom"], "no CUDA bf16 record on >= 50M edges" if big is None else big[
            "graph"
        ]
    if name.startswith("bench_models"):
        m = load_json(d / f"models_{name.split('_')[-1]}.json")
        ok = bool(m) and m.get("dsgraph", {}).get("status") == "ok" and m.get("pyg", {}).get("status") in ("ok", "oom")
        return ok, "dsgraph must finish; PyG finishes or runs out of memory"
    if name == "profile":
        return profile_ok(d / "agp_profile_cuda_bf16.json")
    return False, f"no rule for step {name}"


def _not_run(name: str, step: dict | None, optional: tuple[str, ...]) -> dict:
    """The status of a step that did not run: left out for time, stopped by a failed smoke step, or never reached."""
    why = {"skip": "left out: not enough time left", "stop": "not run: the smoke step failed, the run stopped there"}
    detail = why.get((step or {}).get("rc"), "did not run (the check stopped before it)")
    status = "SKIPPED" if name in optional and step is not None else "FAILED"
    return {"status": status, "detail": detail, "optional": name in optional}


def check_statuses(
    d: Path,
    work: Path,
    plan: tuple[str, ...] = FULL_PLAN,
    optional: tuple[str, ...] = OPTIONAL,
    rehearsal: bool = False,
) -> dict[str, dict]:
    """Every planned step's status and detail, from its exit code and the content of its output (in a
    rehearsal, the CPU counterparts of the steps: from the exit code alone). A step that could not be
    judged (an exception while reading its output) is FAILED with the reason."""
    steps = read_steps(work / "steps.tsv")
    out = {}
    for name in plan:
        step = steps.get(name)
        if step is None or step["rc"] in ("skip", "stop"):
            out[name] = _not_run(name, step, optional)
            continue
        try:
            ok, detail = _content(name, d, work)
        except Exception as err:  # noqa: BLE001 - one unreadable piece fails its step, not the results file
            ok, detail = False, f"could not judge the output: {type(err).__name__}: {err}"
        ok = ok or rehearsal
        if step["rc"] in ("124", "137"):
            detail = f"timed out after {step['seconds']:.0f} s; " + detail
        passed = step["rc"] == "0" and ok
        out[name] = {
            "status": "PASSED" if passed else "FAILED",
            "exit_code": step["rc"],
            "seconds": step["seconds"],
            "detail": detail,
            "log_tail": _tail(work / f"{name}.txt"),
            "optional": name in optional,
        }
    return out


def _tail(path: Path, chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.is_file() else ""


def kernel_figures(kernels) -> dict:
    """The roofline share at >= 50M edges and every fwd+bwd speedup over PyG-style."""
    recs = (kernels or {}).get("records", [])
    big = large_kernel_record(kernels)
    roofline = None
    if big and not big["oom"]:
        roofline = {
            k: big[k] for k in ("graph", "nodes", "edges", "fwd_ms", "fwd_roofline", "peak_gbs", "model_bytes_fwd")
        }
    speedups = []
    for r in recs:
        if r["backend"] != "cuda" or r["oom"]:
            continue
        pyg = next(
            (x for x in recs if x["backend"] == "pyg" and x["graph"] == r["graph"] and x["dtype"] == r["dtype"]), None
        )
        speedups.append(
            {
                "graph": r["graph"],
                "edges": r["edges"],
                "dtype": r["dtype"],
                "cuda_fwd_bwd_ms": r["fwd_bwd_ms"],
                "pyg_fwd_bwd_ms": None if pyg is None or pyg["oom"] else pyg["fwd_bwd_ms"],
                "pyg": "not run" if pyg is None else ("out of memory" if pyg["oom"] else "ran"),
                "speedup_vs_pyg": r["speedup_vs_pyg"],
                "speedup_vs_reference": r["speedup_vs_reference"],
            }
        )
    return {"fwd_roofline_bf16_50M": roofline, "fwd_bwd_speedup_vs_pyg": speedups}


def model_figures(models) -> dict | None:
    if not models:
        return None
    ds, pyg = models.get("dsgraph", {}), models.get("pyg", {})
    return {
        "dataset": models.get("dataset"),
        "nodes": models.get("nodes"),
        "edges": models.get("edges"),
        "dtype": models.get("dtype"),
        "dsgraph_status": ds.get("status"),
        "dsgraph_step_ms": _ms(ds.get("wall_step_s")),
        "dsgraph_trainer_step_time_ms": _ms(ds.get("trainer_step_time_s")),
        "dsgraph_peak_mb": ds.get("peak_mem_mb"),
        "pyg_status": pyg.get("status"),
        "pyg_step_ms": _ms(pyg.get("wall_step_s")),
        "pyg_peak_mb": pyg.get("peak_mem_mb") or pyg.get("peak_mem_mb_before_oom"),
        "pyg_error": pyg.get("error"),
    }


def _ms(seconds):
    return None if seconds is None else seconds * 1e3


def training_figures(train) -> list[dict]:
    return [
        {
            "run": r["name"],
            "status": r.get("check", {}).get("status"),
            "max_rel_diff": r.get("check", {}).get("max_rel_diff"),
            "reason": r.get("check", {}).get("reason"),
            "seconds": r["seconds"],
        }
        for r in (train or {}).get("runs", [])
    ]


def markdown(figures: dict) -> str:
    """The table of docs/GPU.md, filled."""
    lines = ["| figure | value |", "|---|---|"]
    roof = figures["kernels"]["fwd_roofline_bf16_50M"]
    if roof:
        lines.append(
            f"| forward, bf16, {roof['graph']} (E={roof['edges']:,}): % of the no-reuse HBM roofline "
            f"({roof['peak_gbs']:,.0f} GB/s) | {roof['fwd_roofline']:.1%} ({roof['fwd_ms']:.2f} ms) |"
        )
    for s in figures["kernels"]["fwd_bwd_speedup_vs_pyg"]:
        value = f"{s['speedup_vs_pyg']:.1f}x" if s["speedup_vs_pyg"] else f"PyG-style: {s['pyg']}"
        lines.append(
            f"| fwd+bwd speedup over PyG-style, {s['dtype']}, {s['graph']} (E={s['edges']:,}) | {value} "
            f"(cuda {s['cuda_fwd_bwd_ms']:.2f} ms) |"
        )
    for key in ("model_rmat22", "model_rmat20"):
        m = figures.get(key)
        if not m:
            continue
        pyg = (
            f"{m['pyg_step_ms']:.1f} ms, {m['pyg_peak_mb']:,.0f} MB"
            if m["pyg_status"] == "ok"
            else f"{m['pyg_status']}"
        )
        ours = (
            f"{m['dsgraph_step_ms']:.1f} ms, {m['dsgraph_peak_mb']:,.0f} MB"
            if m["dsgraph_status"] == "ok"
            else m["dsgraph_status"]
        )
        lines.append(
            f"| Graph Transformer step, {m['dataset']} (E={m['edges'] or 0:,}), {m['dtype']}: dsgraph | {ours} |"
        )
        lines.append(f"| same shape, PyG TransformerConv | {pyg} |")
    return "\n".join(lines)


def environment() -> dict:
    """What the check runs on: the GPU and driver (nvidia-smi), the versions of torch, CUDA, numba,
    numpy, CuPy, DeepSpeed, PyG, and whether torch's stream has ``__cuda_stream__`` (the protocol
    CuPy 14's ``Stream.from_external`` needs; without it dsgraph hands CuPy the raw handle)."""
    import shutil
    import subprocess

    import torch

    env = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "python": sys.version.split()[0],
    }
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        env["nvidia_smi"] = subprocess.run(query, capture_output=True, text=True).stdout.strip().splitlines()
    if env["cuda_available"]:
        env["gpu"], env["gpus"] = torch.cuda.get_device_name(0), torch.cuda.device_count()
    env["missing"] = []
    stream = torch.cuda.current_stream() if env["cuda_available"] else torch.cuda.Stream
    env["torch_stream_has_cuda_stream"] = hasattr(stream, "__cuda_stream__")
    for name in ("numba", "numpy", "cupy", "deepspeed", "torch_geometric", "pydantic"):
        try:
            env[name] = __import__(name).__version__
        except Exception as err:  # reported, not raised: the environment check says what is missing
            env[name] = f"not importable: {type(err).__name__}: {err}"
            env["missing"].append(name)
    from dsgraph.ops import available_backends

    env["dsgraph_backends"] = available_backends()
    return env


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--environment", metavar="FILE", help="only write the environment (GPU, versions) to FILE; exit 1 without a GPU"
    )
    p.add_argument("--log-dir", help="the folder gpu_check.sh wrote its pieces to")
    p.add_argument(
        "--work-dir",
        help="the folder with steps.tsv, environment.json and each step's output NAME.txt (default: --log-dir)",
    )
    p.add_argument("--plan", help="the steps that were planned, space separated (default: the full plan)")
    p.add_argument("--out", help="results file (default LOG_DIR/gpu_results.json)")
    p.add_argument("--optional", default=" ".join(OPTIONAL), help="steps that never fail the check (space separated)")
    p.add_argument(
        "--rehearsal", action="store_true", help="the CPU rehearsal: steps judged by exit code; no GPU needed"
    )
    p.add_argument(
        "--page", metavar="OUT_DIR", help="a dated page under docs/benchmarks/ from OUT_DIR/gpu_results.json"
    )
    p.add_argument("--docs", default="docs", help="with --page: the docs folder (default docs)")
    args = p.parse_args(argv)
    if not args.environment and not args.log_dir and not args.page:
        p.error("--log-dir is required (or --environment FILE, or --page OUT_DIR)")
    return args


def guarded(fn, *args):
    """fn(*args), or {"error": ...} when it raises: one broken piece costs its figure, not the file."""
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001
        return {"error": f"{type(err).__name__}: {err}"}


def results(
    d: Path, work: Path, plan: tuple[str, ...], optional: tuple[str, ...] = OPTIONAL, rehearsal: bool = False
) -> dict:
    checks = check_statuses(d, work, plan, optional, rehearsal)
    trains = [load_json(d / f) for f in TRAIN_FILES]
    figures = {
        "kernels": guarded(kernel_figures, load_json(d / "kernels.json")),
        "model_rmat22": guarded(model_figures, load_json(d / "models_rmat22.json")),
        "model_rmat20": guarded(model_figures, load_json(d / "models_rmat20.json")),
        "training": guarded(lambda: [row for t in trains for row in training_figures(t)]),
        "profile": load_json(d / "agp_profile_cuda_bf16.json"),
    }
    table = guarded(markdown, figures)
    passed = bool(checks) and all(c["status"] == "PASSED" or c["optional"] for c in checks.values())
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "format": "dsgraph-gpu-results",
        "created": created,
        "passed": passed,
        "plan": list(plan),
        "rehearsal": rehearsal,
        "environment": load_json(work / "environment.json"),
        "checks": checks,
        "figures": figures,
        "table": table if isinstance(table, str) else f"(no table: {table['error']})",
    }


def minimal(work: Path, err: BaseException) -> dict:
    """The verdict when the full results could not be made: FAILED, the reason, the steps' exit codes."""
    import traceback

    try:
        steps = read_steps(work / "steps.tsv")
    except Exception as again:  # noqa: BLE001
        steps = {"unreadable": {"rc": f"{type(again).__name__}: {again}", "seconds": 0.0}}
    return {
        "format": "dsgraph-gpu-results",
        "passed": False,
        "minimal": True,
        "reason": f"the results writer failed: {type(err).__name__}: {err}",
        "traceback": "".join(traceback.format_exception(err))[-3000:],
        "steps": steps,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.page:
        from tools.gpu.page import write_page

        print(f"gpu_results: wrote {write_page(Path(args.page), Path(args.docs))}")
        return 0
    if args.environment:
        env = environment()
        Path(args.environment).write_text(json.dumps(env, indent=1) + "\n")
        print(json.dumps(env, indent=1))
        if args.rehearsal:  # the CPU machine: no GPU, and DeepSpeed's wheels are for the GPU machine's Python
            return 0 if "cpu" in env["dsgraph_backends"] else 1
        return 0 if env["cuda_available"] and "cuda" in env["dsgraph_backends"] and not env["missing"] else 1
    d, work = Path(args.log_dir), Path(args.work_dir or args.log_dir)
    out = Path(args.out or d / "gpu_results.json")
    plan = tuple(args.plan.split()) if args.plan else FULL_PLAN
    try:
        report = results(d, work, plan, tuple(args.optional.split()), args.rehearsal)
        text = json.dumps(report, indent=1, default=str) + "\n"
    except Exception as err:  # noqa: BLE001 - whatever happens, a verdict is written
        report = minimal(work, err)
        text = json.dumps(report, indent=1, default=str) + "\n"
        print(
            f"gpu_check: the results writer failed ({type(err).__name__}: {err}); writing a minimal verdict",
            file=sys.stderr,
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    for name, c in report.get("checks", {}).items():
        mark = " (optional)" if c.get("optional") else ""
        print(f"{c['status']:<8} {name:<22} {c.get('seconds', '-')!s:>6} s  {c['detail'][:150]}{mark}")
    print(report.get("table", ""))
    print(f"gpu_check: {'PASSED' if report['passed'] else 'FAILED'} (results in {out})")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
