#!/usr/bin/env python
"""Training on one device, through dsgraph's command line only: every strategy and mode that runs
on one rank (ag, a2a, halo, auto, sampled, isolated) on Cora in fp32 and bf16, the Transformer
block with nested activation checkpointing (ag) in both, and the default strategy on rmat:20 in
bf16, each for a few steps. Each run is

    deepspeed --num_gpus 1 launch/train.py --deepspeed_config CONFIG --strategy S --dataset D \\
        --epochs E --eval-every E --seed 0 --backend cuda --metrics-out FILE [--agp-profile P]

(``--num_accelerators 1 ... --backend cpu`` with --device cpu; the launcher is started as
``python -m deepspeed.launcher.runner``, the entry point of the ``deepspeed`` script). CONFIG is
ds_configs/gpu_quickstart.json with bf16 switched on or off. The losses are the metrics rows with
"kind": "step", key "loss". A run's ``settings`` go into the config's dsgraph section.

    # on the CPU machine: the reference losses (and a fingerprint of the sources they came from)
    python -m tools.gpu.train_check --device cpu --out .gpu_pack/reference_losses.json
    # on the GPU machine: the same runs, compared with the reference
    python -m tools.gpu.train_check --device cuda --reference .gpu_pack/reference_losses.json --out train.json

A GPU run passes when it exits 0, logs as many steps as the reference, every loss is finite and
within the relative tolerance of its dtype (fp32 1e-3, bf16 2e-2) of the reference, and (auto)
the AGP profile was accepted rather than replaced by the fallback. A reference made from other
sources (the fingerprint differs) fails every comparison: rerun the CPU side first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE_CONFIG = ROOT / "ds_configs" / "gpu_quickstart.json"
PROFILES = {
    "fp32": ROOT / "docs/agp/dgx_h100_8gpu_profile.json",
    "bf16": ROOT / "docs/agp/dgx_h100_8gpu_bf16_profile.json",
}
STRATEGIES = ("ag", "a2a", "halo", "auto", "sampled", "isolated")
CHECKPOINTED = {
    "checkpoint_activations": True,
    "checkpoint_nested": True,  # recomputes on the device
    "model": {"block": "transformer", "input_projection": True, "norm": "pre", "head": "linear"},
}
TOLERANCE = {"fp32": 1e-3, "bf16": 2e-2}  # relative, per step loss
FORMAT = "dsgraph-gpu-train-check"
FINGERPRINT_PATHS = (
    "dsgraph",
    "launch/train.py",
    "ds_configs/gpu_quickstart.json",
    "tools/gpu/train_check.py",
    *(str(p.relative_to(ROOT)) for p in PROFILES.values()),
)


@dataclass(frozen=True)
class RunSpec:
    name: str
    strategy: str
    dtype: str
    dataset: str
    epochs: int
    settings: dict = field(default_factory=dict)


def run_specs(cora_epochs: int = 5, rmat_epochs: int = 3) -> list[RunSpec]:
    """Every one-rank strategy and mode on Cora in fp32 and bf16, checkpointed ag in both, then ag on
    rmat:20 in bf16."""
    runs = [RunSpec(f"cora-{d}-{s}", s, d, "cora", cora_epochs) for d in ("fp32", "bf16") for s in STRATEGIES]
    runs += [RunSpec(f"cora-{d}-ag-checkpointed", "ag", d, "cora", cora_epochs, CHECKPOINTED) for d in ("fp32", "bf16")]
    return runs + [RunSpec("rmat20-bf16-ag", "ag", "bf16", "rmat:20", rmat_epochs)]


def fingerprint(root: Path = ROOT, paths: tuple[str, ...] = FINGERPRINT_PATHS) -> str:
    """sha256 over the files that decide the losses (the package, entry point, config, profiles,
    this tool): a reference from other sources does not count."""
    digest = hashlib.sha256()
    for top in paths:
        base = root / top
        files = (
            [base]
            if base.is_file()
            else sorted(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        )
        for path in files:
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def write_config(spec: RunSpec, folder: Path) -> Path:
    """gpu_quickstart.json with bf16 set for the run's dtype and TensorBoard off (isolated: ZeRO-0 in
    fp32, the per-step sync in bf16); returns its path."""
    config = json.loads(BASE_CONFIG.read_text())
    config["bf16"] = {"enabled": spec.dtype == "bf16"}
    config["tensorboard"] = {"enabled": False}
    config["dsgraph"]["checkpoint_dir"] = str(folder / f"{spec.name}-checkpoints")
    config["dsgraph"].update(spec.settings)
    if spec.strategy == "isolated":  # local steps need ZeRO-0 fp32; bf16 checks the per-step path
        if spec.dtype == "fp32":
            config["zero_optimization"] = {"stage": 0}
        else:
            config["dsgraph"].setdefault("isolated", {})["sync"] = "step"
    path = folder / f"{spec.name}.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def command(spec: RunSpec, config: Path, metrics: Path, device: str, port: int) -> list[str]:
    """The launcher command line of one run."""
    launcher = [sys.executable, "-m", "deepspeed.launcher.runner", "--master_port", str(port)]
    launcher += ["--num_gpus", "1"] if device == "cuda" else ["--num_accelerators", "1"]
    cmd = launcher + [
        str(ROOT / "launch/train.py"),
        "--deepspeed_config",
        str(config),
        "--strategy",
        spec.strategy,
        "--dataset",
        spec.dataset,
        "--epochs",
        str(spec.epochs),
        "--eval-every",
        str(spec.epochs),
        "--seed",
        "0",
        "--backend",
        device,
        "--metrics-out",
        str(metrics),
    ]
    if spec.strategy == "auto":
        cmd += ["--agp-profile", str(PROFILES[spec.dtype])]
    return cmd


def read_steps(metrics: Path) -> list[dict]:
    """The step rows of a metrics file (none when it is missing)."""
    if not metrics.is_file():
        return []
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("kind") == "step"]


def _environment(device: str, threads: int) -> dict:
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS=str(threads),
        NUMBA_NUM_THREADS=str(threads),
        DS_ACCELERATOR="cuda" if device == "cuda" else "cpu",
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def run_one(spec: RunSpec, folder: Path, device: str, port: int, deadline: float, threads: int) -> dict:
    """Runs one training job (its own process group, killed whole at the deadline)."""
    metrics = folder / f"{spec.name}.jsonl"
    result = {**asdict(spec), "returncode": None, "seconds": 0.0, "losses": [], "agp_decision": None, "log_tail": ""}
    budget = deadline - time.monotonic()
    if budget <= 1:
        result["log_tail"] = "not started: the check ran out of time"
        return result
    cmd = command(spec, write_config(spec, folder), metrics, device, port)
    began = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=_environment(device, threads),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=budget)
        result["returncode"] = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
        out += f"\n[gpu_train_check] killed after {budget:.0f} s (the check's time limit)"
    steps = read_steps(metrics)
    result.update(seconds=round(time.monotonic() - began, 1), losses=[r["loss"] for r in steps], log_tail=out[-3000:])
    result["agp_decision"] = next((r.get("agp_decision") for r in steps if r.get("agp_decision")), None)
    (folder / f"{spec.name}.log").write_text(" ".join(cmd) + "\n" + out)
    return result


def compare(run: dict, ref: dict | None, same_sources: bool) -> dict:
    """PASSED/FAILED of one device run against its reference run, with the reason."""
    tol = TOLERANCE[run["dtype"]]
    verdict = {"status": "FAILED", "tolerance": tol, "max_rel_diff": None, "reason": ""}
    got = run["losses"]
    if run["returncode"] != 0:
        return {**verdict, "reason": f"exit code {run['returncode']}"}
    if not same_sources:
        return {
            **verdict,
            "reason": "the reference losses come from other sources; rerun `bash tools/gpu/check.sh --prepare`",
        }
    if ref is None or ref.get("returncode") != 0 or not ref.get("losses"):
        return {
            **verdict,
            "reason": "no usable reference run of this configuration (`bash tools/gpu/check.sh --prepare` makes them)",
        }
    want = ref["losses"]
    if len(got) != len(want):
        return {**verdict, "reason": f"{len(got)} step losses, the reference has {len(want)}"}
    if not all(math.isfinite(x) for x in got):
        return {**verdict, "reason": f"non-finite loss: {got}"}
    diff = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, want))
    verdict["max_rel_diff"] = diff
    if diff > tol:
        return {**verdict, "reason": f"loss differs by {diff:.2e} (relative) > {tol:g}: {got} vs {want}"}
    if run["strategy"] == "auto" and "(fallback" in (
        run.get("agp_decision") or "(fallback: no agp_decision in the metrics)"
    ):
        return {**verdict, "reason": f"AGP did not use its profile: {run.get('agp_decision')}"}
    return {**verdict, "status": "PASSED"}


def run_all(specs, device: str, jobs: int, timeout_s: float, threads: int, port: int) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    folder = Path(tempfile.mkdtemp(prefix="dsgraph-train-check-"))
    print(f"gpu_train_check: {len(specs)} runs on {device}, {jobs} at a time, logs in {folder}", flush=True)
    first = sorted(range(len(specs)), key=lambda i: specs[i].dataset == "cora")  # the long rmat run starts first
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {i: pool.submit(run_one, specs[i], folder, device, port + i, deadline, threads) for i in first}
        return [futures[i].result() for i in range(len(specs))]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], required=True, help="where the runs train")
    p.add_argument("--out", required=True, help="results JSON (from --device cpu: the reference for a GPU run)")
    p.add_argument("--reference", help="results JSON of the same runs on the CPU to compare the losses with")
    p.add_argument("--only", help="comma list of run names (default: all; see --list)")
    p.add_argument("--list", action="store_true", help="print the run names and exit")
    p.add_argument("--jobs", type=int, default=None, help="runs at a time (default: 6 on cuda, 1 on cpu)")
    p.add_argument("--threads", type=int, default=2, help="OMP/numba threads per run (default 2)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds for all runs together (default 900)")
    p.add_argument("--cora-epochs", type=int, default=5)
    p.add_argument("--rmat-epochs", type=int, default=3)
    p.add_argument("--port", type=int, default=29620, help="first master port; run i uses PORT + i")
    return p.parse_args(argv)


def select(specs: list[RunSpec], only: str | None) -> list[RunSpec]:
    if not only:
        return specs
    names = only.split(",")
    unknown = sorted(set(names) - {s.name for s in specs})
    if unknown:
        raise SystemExit(
            f"gpu_train_check: unknown run(s) {', '.join(unknown)}; choose from {', '.join(s.name for s in specs)}"
        )
    return [s for s in specs if s.name in names]


def main(argv=None) -> int:
    args = parse_args(argv)
    specs = select(run_specs(args.cora_epochs, args.rmat_epochs), args.only)
    if args.list:
        print("\n".join(s.name for s in specs))
        return 0
    reference = None
    if args.reference:
        if Path(args.reference).is_file():
            reference = json.loads(Path(args.reference).read_text())
        else:
            print(
                f"gpu_train_check: no reference file {args.reference}; make it with `bash tools/gpu/check.sh --prepare`"
            )
            reference = {"format": FORMAT, "fingerprint": fingerprint(), "runs": []}
    jobs = args.jobs or (6 if args.device == "cuda" else 1)
    runs = run_all(specs, args.device, jobs, args.timeout, args.threads, args.port)
    ok = all(r["returncode"] == 0 for r in runs)
    if reference is not None:
        same = reference.get("format") == FORMAT and reference.get("fingerprint") == fingerprint()
        refs = {r["name"]: r for r in reference.get("runs", [])}
        for r in runs:
            r["check"] = compare(r, refs.get(r["name"]), same)
        ok = all(r["check"]["status"] == "PASSED" for r in runs)
    report = {
        "format": FORMAT,
        "device": args.device,
        "fingerprint": fingerprint(),
        "passed": ok,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(summary(runs))
    print(f"gpu_train_check: {'PASSED' if ok else 'FAILED'} ({args.out})")
    return 0 if ok else 1


def summary(runs: list[dict]) -> str:
    lines = ["| run | exit | steps | seconds | max rel diff | check |", "|---|---|---|---|---|---|"]
    for r in runs:
        check = r.get("check", {})
        diff = check.get("max_rel_diff")
        status = check.get("status", "ran" if r["returncode"] == 0 else "FAILED")
        reason = f" ({check['reason']})" if check.get("reason") else ""
        lines.append(
            f"| {r['name']} | {r['returncode']} | {len(r['losses'])} | {r['seconds']} | "
            f"{'-' if diff is None else f'{diff:.1e}'} | {status}{reason[:200]} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
