"""A checkpoint's manifest: what makes a checkpoint folder complete, and how it is checked.

A checkpoint folder (one DeepSpeed tag) is complete only when ``dsgraph_manifest.json`` exists in
it. The manifest is written last, after every rank has written its files, by an atomic rename of a
fully written and fsynced temporary file; it lists every file with its size and sha256, and the
run's world size, ZeRO stage, dtype, epoch and config hash. Pure functions, no processes: the
distributed part (which rank hashes what) lives in ``checkpoint.py``.
"""

from __future__ import annotations

import hashlib
import json
import os

MANIFEST = "dsgraph_manifest.json"
FORMAT_VERSION = 1
KINDS = ("deepspeed", "universal")

# the settings a checkpoint's steps depend on: resuming with others would not continue the same run
RESUME_KEYS = (
    "seed",
    "hidden",
    "heads",
    "layers",
    "ffn_mult",
    "model",
    "dropout",
    "input_dropout",
    "attention_dropout",
    "self_loops",
    "mode",
)


def resume_settings(cfg_dict: dict) -> dict:
    return {key: cfg_dict[key] for key in RESUME_KEYS}


def config_hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def sha256_file(path: str, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def list_files(folder: str) -> list[str]:
    """Every file under ``folder`` (relative paths, sorted) except the manifest and its temporary."""
    out = []
    for root, _, names in os.walk(folder):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), folder)
            if rel != MANIFEST and not rel.startswith(MANIFEST):
                out.append(rel)
    return sorted(out)


def describe(folder: str, rels: list[str]) -> dict[str, dict]:
    """{relpath: {"size": bytes, "sha256": hex}} of ``rels`` under ``folder``."""
    return {
        rel: {"size": os.path.getsize(os.path.join(folder, rel)), "sha256": sha256_file(os.path.join(folder, rel))}
        for rel in rels
    }


def write(folder: str, manifest: dict) -> str:
    """Writes ``manifest`` into ``folder`` atomically (temporary file, fsync, rename, fsync of the
    folder); returns its path."""
    path = os.path.join(folder, MANIFEST)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_folder(folder)
    return path


def fsync_folder(folder: str) -> None:
    """Makes the renames and new names in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read(folder: str) -> dict:
    """The manifest of ``folder``; ValueError (naming the file and the problem) if it is missing,
    not JSON, or lacks a field."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(path):
        raise ValueError(f"{path} is missing (the save did not finish)")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{path} is not a JSON object")
    missing = [
        k
        for k in ("format_version", "kind", "epoch", "world_size", "zero_stage", "dtype", "files")
        if k not in manifest
    ]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}")
    if manifest["format_version"] > FORMAT_VERSION:
        raise ValueError(
            f"{path}: format_version {manifest['format_version']} is newer than this dsgraph reads ({FORMAT_VERSION})"
        )
    if manifest["kind"] not in KINDS or not isinstance(manifest["files"], dict) or not manifest["files"]:
        raise ValueError(f"{path}: unknown kind {manifest['kind']!r} or an empty file list")
    return manifest


def check_files(folder: str, files: dict[str, dict], rels: list[str]) -> list[str]:
    """Problems of the files ``rels`` (a share of ``files``) under ``folder``: missing, wrong size,
    sha256 mismatch. Each problem names the file."""
    problems = []
    for rel in rels:
        path, want = os.path.join(folder, rel), files[rel]
        if not os.path.isfile(path):
            problems.append(f"{path} is missing")
        elif os.path.getsize(path) != want["size"]:
            problems.append(
                f"{path} is truncated or changed ({os.path.getsize(path)} bytes, the manifest says {want['size']})"
            )
        elif sha256_file(path) != want["sha256"]:
            problems.append(f"{path}: sha256 checksum mismatch (the file is corrupted)")
    return problems
