"""``dsgraph checkpoint``: check, convert and export the checkpoints of a checkpoint_dir.

    dsgraph checkpoint verify  --dir runs/checkpoints              # each checkpoint: complete or what is wrong
    dsgraph checkpoint convert --dir runs/checkpoints [--tag T]    # universal checkpoint beside it (any world size)
    dsgraph checkpoint export  --dir runs/checkpoints [--tag T] --out model.pt   # fp32 state_dict

Without --tag: the newest complete checkpoint. One process, no GPU and no process group needed.
Exit code 0, or 2 with a message naming the folder and the problem.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from dsgraph.train import checkpoint as ck
from dsgraph.train import manifest as mf


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dsgraph checkpoint", description="Check, convert and export dsgraph checkpoints.")
    sub = p.add_subparsers(dest="action", required=True)
    for name, text in (
        ("verify", "check every checkpoint's manifest, sizes and sha256 checksums"),
        ("convert", "write the universal checkpoint (loads at any world size) beside a checkpoint"),
        ("export", "write the model's consolidated fp32 state_dict (torch.save) for use outside DeepSpeed"),
    ):
        s = sub.add_parser(name, help=text, description=text)
        s.add_argument("--dir", required=True, help="the checkpoint_dir (folders epochNNNNNN)")
        if name != "verify":
            s.add_argument("--tag", help="checkpoint folder name, e.g. epoch000009 (default: the newest complete one)")
        if name == "export":
            s.add_argument("--out", required=True, help="output file, e.g. model.pt")
    return p


def _newest_complete(directory: str) -> str:
    problems = []
    for _, tag in ck.list_tags(directory):
        manifest, found = ck.verify(os.path.join(directory, tag))
        if manifest is not None:
            return tag
        problems.append(f"{tag}: {found[0]}")
    if not problems:
        raise FileNotFoundError(f"{directory}: no checkpoint (no epochNNNNNN folder)")
    raise ValueError(f"{directory}: no complete checkpoint: " + "; ".join(problems))


def _checked(directory: str, tag: str | None) -> str:
    tag = tag or _newest_complete(directory)
    folder = os.path.join(directory, tag)
    manifest, problems = ck.verify(folder)
    if manifest is None:
        raise ValueError(f"{folder}: " + "; ".join(problems))
    return folder


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.action == "verify":
            return _verify(args.dir)
        folder = _checked(args.dir, args.tag)
        if args.action == "convert":
            from dsgraph.train.universal import convert

            out = convert(folder, ck.universal_dir(args.dir, os.path.basename(folder)))
            print(
                f"dsgraph: universal checkpoint {out} (resume at any world size: dsgraph converts and loads it itself)"
            )
        else:
            from dsgraph.train.universal import export_fp32

            state = export_fp32(folder)
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            tmp = args.out + ".tmp"
            torch.save(state, tmp)
            os.replace(tmp, args.out)
            numel = sum(t.numel() for t in state.values())
            print(f"dsgraph: {args.out}: fp32 state_dict of {folder}, {len(state)} tensors, {numel:,} parameters")
        return 0
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph checkpoint: error: {err}", file=sys.stderr)
        return 2


def _verify(directory: str) -> int:
    tags = ck.list_tags(directory)
    if not tags:
        raise FileNotFoundError(f"{directory}: no checkpoint (no epochNNNNNN folder)")
    usable = 0
    for _, tag in tags:
        folder = os.path.join(directory, tag)
        manifest, problems = ck.verify(folder)
        if manifest is None:
            print(f"{folder}: NOT usable: " + "; ".join(problems))
            continue
        usable += 1
        size = sum(f["size"] for f in manifest["files"].values())
        converted = os.path.isfile(os.path.join(ck.universal_dir(directory, tag), mf.MANIFEST))
        print(
            f"{folder}: complete: epoch {manifest['epoch']}, {manifest['world_size']} ranks, ZeRO stage "
            f"{manifest['zero_stage']}, {manifest['dtype']}, {len(manifest['files'])} files, {size:,} bytes"
            + (", universal conversion beside it" if converted else "")
        )
    if not usable:
        print(f"dsgraph checkpoint: error: {directory}: no usable checkpoint", file=sys.stderr)
        return 2
    return 0
