#!/usr/bin/env python
"""Packs the wheels that the GPU machine lacks into one folder that travels with the working tree
(``carry``): DeepSpeed built here as a wheel, and its requirements missing from the GPU image as
CPython 3.12 manylinux x86-64 wheels, in the versions installed in this environment.

    .venv/bin/python -m tools.gpu.pack --dir .gpu_pack/wheels      # (bash tools/gpu/check.sh --prepare)

It checks that every wheel installs on CPython 3.12 / Linux x86-64, that every requirement of
every packed wheel is packed or on the GPU image (ON_GPU_IMAGE), and that the folder stays within
--max-mib; it writes MANIFEST.json (file, name, version, bytes, sha256) and prints what it packed.
On the GPU machine:

    python3 -m pip install --no-index --no-deps --target /tmp/dsgraph-site .gpu_pack/wheels/*.whl
    export PYTHONPATH=/tmp/dsgraph-site:$PWD
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

DEEPSPEED = "deepspeed==0.19.8"
MISSING_ON_GPU = ("hjson", "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions")
# packages of the GPU image (the device notes' list) that the packed wheels may require
ON_GPU_IMAGE = frozenset(
    canonicalize_name(n)
    for n in (
        "torch",
        "numpy",
        "einops",
        "msgpack",
        "ninja",
        "packaging",
        "psutil",
        "py-cpuinfo",
        "tqdm",
        "nvidia-ml-py",
        "scipy",
        "numba",
        "mpi4py",
        "tensorboard",
        "torch-geometric",
        "cupy-cuda13x",
        "pytest",
    )
)
NOT_NEEDED = {"pymetis": "imported only to METIS-partition into 2 or more parts; one GPU trains one part"}
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
TARGET_ENV = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
    "extra": "",
}


def build_deepspeed(folder: Path) -> None:
    """DeepSpeed is published as an sdist; a no-build-isolation wheel uses this environment's torch."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-cache-dir",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(folder),
        DEEPSPEED,
    ]
    subprocess.run(cmd, check=True)


def download(names: list[str], folder: Path) -> None:
    """Binary wheels of ``names`` at this environment's versions, for CPython 3.12 manylinux x86-64."""
    pins = [f"{name}=={metadata.version(name)}" for name in names]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        *sum((["--platform", p] for p in PLATFORMS), []),
        "-d",
        str(folder),
        *pins,
    ]
    subprocess.run(cmd, check=True)


def installs_on_target(filename: str) -> bool:
    """True when a wheel's tags include one that CPython 3.12 on manylinux x86-64 accepts."""
    _, _, _, tags = parse_wheel_filename(filename)
    for tag in tags:
        py_ok = tag.interpreter in ("py3", "cp312") or (tag.abi == "abi3" and tag.interpreter.startswith("cp3"))
        plat_ok = tag.platform == "any" or (
            tag.platform.endswith("_x86_64") and tag.platform.startswith(("manylinux", "linux"))
        )
        if py_ok and plat_ok and tag.abi in ("none", "abi3", "cp312"):
            return True
    return False


def wheel_metadata(path: Path) -> tuple[str, str, list[Requirement]]:
    """(name, version, requirements that apply on the target without extras) of a wheel."""
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(z.read(name).decode())
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    return meta["Name"], meta["Version"], [r for r in reqs if r.marker is None or r.marker.evaluate(TARGET_ENV)]


def check_pack(folder: Path, max_mib: float) -> list[dict]:
    """The manifest of ``folder``; ValueError naming what is wrong (tag, requirement, duplicate, size)."""
    entries, required = [], {}
    for path in sorted(folder.glob("*.whl")):
        if not installs_on_target(path.name):
            raise ValueError(
                f"{path.name}: no tag installs on CPython 3.12 / manylinux x86-64; download the cp312 wheel"
            )
        name, version, reqs = wheel_metadata(path)
        entries.append(
            {
                "file": path.name,
                "name": name,
                "version": version,
                "bytes": path.stat().st_size,
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            }
        )
        for r in reqs:
            required.setdefault(canonicalize_name(r.name), []).append(name)
    packed = [canonicalize_name(e["name"]) for e in entries]
    duplicates = sorted({n for n in packed if packed.count(n) > 1})
    if duplicates:
        raise ValueError(
            f"{folder}: more than one version of {', '.join(duplicates)}; pip refuses to install two, delete the extra"
        )
    missing = {n: by for n, by in required.items() if n not in packed and n not in ON_GPU_IMAGE}
    if missing:
        raise ValueError(
            "not packed and not on the GPU image: "
            + "; ".join(f"{n} (needed by {', '.join(by)})" for n, by in missing.items())
        )
    total = sum(e["bytes"] for e in entries)
    if total > max_mib * 2**20:
        raise ValueError(f"{folder}: {total / 2**20:.1f} MiB of wheels, over the {max_mib:g} MiB that may travel")
    return entries


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dir", default=".gpu_pack/wheels", help="folder for the wheels (emptied first; default .gpu_pack/wheels)"
    )
    p.add_argument("--max-mib", type=float, default=60.0, help="size limit of the folder (default 60 MiB)")
    args = p.parse_args(argv)
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):
        old.unlink()
    build_deepspeed(folder)
    download(list(MISSING_ON_GPU), folder)
    try:
        entries = check_pack(folder, args.max_mib)
    except ValueError as err:
        print(f"gpu_pack: error: {err}", file=sys.stderr)
        return 2
    (folder / "MANIFEST.json").write_text(json.dumps(entries, indent=1) + "\n")
    for e in entries:
        print(f"  {e['file']:<70} {e['bytes'] / 2**20:7.2f} MiB")
    print(f"gpu_pack: {len(entries)} wheels, {sum(e['bytes'] for e in entries) / 2**20:.2f} MiB in {folder}")
    for name, why in NOT_NEEDED.items():
        print(f"gpu_pack: not packed: {name} ({why})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
