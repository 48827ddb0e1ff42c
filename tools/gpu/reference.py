"""The CPU reference losses that the GPU training check compares with: tools/gpu/reference_losses.json,
committed with the sources it was made from, and checked against them (tests/tools/test_gpu_reference.py).

    python -m tools.gpu.reference --check tools/gpu/reference_losses.json          # exit 1, saying why, if
                                                                                   # stale or not every run passed
    python -m tools.gpu.reference --accept CANDIDATE --to tools/gpu/reference_losses.json

A reference is usable when it is a CPU run of tools/gpu/train_inprocess.py whose fingerprint is that
of the sources now (``train_inprocess.fingerprint``: the dsgraph package, launch/train.py, the GPU
config, the AGP profiles and the training tools), with every run of ``ordered_specs`` present, exit
code 0, as many finite losses as epochs. ``--accept`` copies the candidate (``bash tools/gpu/check.sh
--prepare`` makes it) to the reference only then, with a digest per source file, so that a stale
reference names the files that changed; otherwise it leaves the reference as it was and exits 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from pathlib import Path

from tools.gpu import train_inprocess
from tools.gpu.train_check import ROOT

REFERENCE = ROOT / "tools" / "gpu" / "reference_losses.json"
REMAKE = "run `bash tools/gpu/check.sh --prepare` and commit tools/gpu/reference_losses.json"


def file_digests(root: Path = ROOT) -> dict[str, str]:
    """A digest per file of the fingerprint, walked as ``train_check.fingerprint`` walks them."""
    out = {}
    for top in train_inprocess.FINGERPRINT_PATHS:
        base = root / top
        files = (
            [base]
            if base.is_file()
            else sorted(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        )
        for path in files:
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return out


def run_problems(ref: dict) -> list[str]:
    """What keeps ``ref`` from being a reference: its format, device, and every run that is missing or failed."""
    if ref.get("format") != train_inprocess.FORMAT or ref.get("device") != "cpu":
        return [
            f"not a CPU run of tools/gpu/train_inprocess.py (format {ref.get('format')}, device {ref.get('device')})"
        ]
    runs = {r["name"]: r for r in ref.get("runs", [])}
    problems = []
    for spec in train_inprocess.ordered_specs():
        r = runs.get(spec.name)
        if r is None:
            problems.append(f"{spec.name}: no run")
        elif r.get("returncode") != 0:
            last = (r.get("log_tail") or "").strip().splitlines()[-1:] or ["no output"]
            problems.append(
                f"{spec.name}: failed (exit {r.get('returncode')} after {r.get('seconds')} s: {last[0][:160]})"
            )
        elif len(r.get("losses", [])) != spec.epochs or not all(math.isfinite(x) for x in r["losses"]):
            problems.append(
                f"{spec.name}: {len(r.get('losses', []))} losses for {spec.epochs} epochs, or one not finite"
            )
    return problems


def staleness(ref: dict, root: Path = ROOT) -> str:
    """'' when ``ref`` comes from the sources under ``root``, else which files differ."""
    if ref.get("fingerprint") == train_inprocess.train_check.fingerprint(root, train_inprocess.FINGERPRINT_PATHS):
        return ""
    old, now = ref.get("files", {}), file_digests(root)
    changed = sorted(f for f in old.keys() | now.keys() if old.get(f) != now.get(f))
    names = (
        ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        if old
        else "unknown files"
    )
    return f"the reference comes from other sources (changed since: {names}); {REMAKE}"


def check(path: Path, root: Path = ROOT) -> list[str]:
    """Every reason why ``path`` is not a usable reference for the sources under ``root`` ([] if it is)."""
    try:
        ref = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        return [f"{path}: no reference ({err}); {REMAKE}"]
    stale = staleness(ref, root)
    return run_problems(ref) + ([stale] if stale else [])


def accept(candidate: Path, to: Path) -> list[str]:
    """Copies ``candidate`` to ``to`` (with the per-file digests) if it is a usable reference; else the reasons."""
    problems = check(candidate)
    if problems:
        return problems
    ref = json.loads(candidate.read_text())
    ref["files"] = file_digests()
    partial = to.with_name(to.name + ".partial")
    partial.write_text(json.dumps(ref, indent=1) + "\n")
    os.replace(partial, to)
    return []


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--check", metavar="REF", help="exit 0 if REF is a usable reference for these sources")
    what.add_argument("--accept", metavar="CANDIDATE", help="copy CANDIDATE to --to if it is a usable reference")
    p.add_argument(
        "--to", default=str(REFERENCE), help=f"the reference to write (default {REFERENCE.relative_to(ROOT)})"
    )
    args = p.parse_args(argv)
    if args.check:
        problems = check(Path(args.check))
        for line in problems:
            print(f"gpu_reference: {args.check}: {line}")
        return 1 if problems else 0
    problems = accept(Path(args.accept), Path(args.to))
    for line in problems:
        print(f"gpu_reference: refused {args.accept}: {line}")
    if problems:
        print(f"gpu_reference: {args.to} left as it was")
        return 1
    print(f"gpu_reference: {args.accept} -> {args.to}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
