"""Checkpoints that load at any world size, and a consolidated fp32 model for use outside DeepSpeed.

DeepSpeed's ZeRO checkpoints hold one optimizer shard per rank and load only at the world size that
wrote them. Its universal checkpoint (``deepspeed.checkpoint.ds_to_universal``) stores every
parameter whole (fp32 weights, Adam's moments) and loads at any world size with
``"checkpoint": {"load_universal": true}``. dsgraph converts a checkpoint once, into
``epochNNNNNN_universal`` beside it (written under a temporary name, given its own manifest, then
renamed), and loads that; a later resume reuses the conversion while its manifest checks out.
This module runs no collective and imports no other checkpoint module but the manifest's;
``checkpoint.py`` decides when to convert (rank 0) and hands the outcome to every rank.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil

import torch

from dsgraph.train import manifest as mf


def convert(folder: str, out: str) -> str:
    """Converts the DeepSpeed checkpoint ``folder`` into the universal checkpoint ``out`` (one
    process, no process group) and writes its manifest. Returns ``out``; ValueError with DeepSpeed's
    output if the conversion fails."""
    from deepspeed.checkpoint import ds_to_universal

    source = mf.read(folder)
    partial = os.path.join(os.path.dirname(out), "." + os.path.basename(out) + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    args = argparse.Namespace(
        input_folder=folder,
        output_folder=partial,
        num_extract_workers=1,
        num_merge_workers=1,
        keep_temp_folder=False,
        strict=True,
        inject_missing_state=True,
    )
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            ds_to_universal.main(args)
    except Exception as err:
        shutil.rmtree(partial, ignore_errors=True)
        tail = captured.getvalue()[-1500:]
        raise ValueError(
            f"{folder}: conversion to a universal checkpoint failed: {type(err).__name__}: {err}\n{tail}"
        ) from None
    files = mf.describe(partial, mf.list_files(partial))
    mf.write(
        partial,
        {**{k: v for k, v in source.items() if k != "files"}, "kind": "universal", "source": folder, "files": files},
    )
    shutil.rmtree(out, ignore_errors=True)
    os.replace(partial, out)
    with open(
        os.path.join(os.path.dirname(out), "latest_universal"), "w"
    ) as f:  # ds_to_universal named the partial folder
        f.write(os.path.basename(out))
    return out


def load(engine, directory: str, universal_tag: str):
    """``engine.load_checkpoint`` of a universal checkpoint (DeepSpeed reads the config flag only
    while loading)."""
    config = engine._config
    previous = config.load_universal_checkpoint
    config.load_universal_checkpoint = True
    try:
        return engine.load_checkpoint(directory, tag=universal_tag)
    finally:
        config.load_universal_checkpoint = previous


def export_fp32(folder: str) -> dict[str, torch.Tensor]:
    """The whole model's fp32 state_dict from the checkpoint ``folder`` (any ZeRO stage, any world
    size that wrote it), as ``model.load_state_dict`` takes it."""
    manifest = mf.read(folder)
    if manifest["kind"] != "deepspeed":
        raise ValueError(f"{folder}: export reads the DeepSpeed checkpoint, not its universal conversion")
    if manifest["zero_stage"] == 0:
        path = os.path.join(folder, "mp_rank_00_model_states.pt")
        module = torch.load(path, map_location="cpu", weights_only=True)["module"]
        return {k: v.float() for k, v in module.items()}
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    directory, tag = os.path.split(os.path.normpath(folder))
    with contextlib.redirect_stdout(io.StringIO()):
        state = get_fp32_state_dict_from_zero_checkpoint(directory, tag=tag)
    return {k: v.float() for k, v in state.items()}
