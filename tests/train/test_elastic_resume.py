"""Elastic resume: a checkpoint written on P ranks resumes on P' ranks (2 -> 1, 1 -> 2, 2 -> 4) for
ZeRO 1, 2 and 3 in fp32, through a universal checkpoint converted beside it, and continues with the
losses of one uninterrupted 1-rank run (dsgraph's steps do not depend on the rank count); and in
bf16 (ZeRO-2, 2 -> 1), close to the 1-rank bf16 run.

Four process groups in all: the saves at 2 ranks; at 1 rank the reference, the saves and the
resumes 2 -> 1; the resumes 1 -> 2; the resumes 2 -> 4 (which reuse the 2 -> 1 conversions).
"""

import json
import os

import pytest

from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, make_trainer, write_random_graph

pytestmark = pytest.mark.slow  # every test here starts processes

STAGES = (1, 2, 3)
EPOCHS, SAVED = 4, 2  # the checkpoint after epoch 1 is resumed for epochs 2 and 3
MOVES = {1: [2], 2: [1, 4]}  # world size that wrote -> world sizes that resume


def _losses(path):
    with open(path) as f:
        return [row["loss"] for row in map(json.loads, f) if row["kind"] == "step"]


def _save(tmp, stage, world, bf16=False):
    name = f"ck_s{stage}_w{world}" + ("_bf16" if bf16 else "")
    trainer = make_trainer(
        tmp, ds_config(stage=stage, bf16=bf16), epochs=SAVED, checkpoint_every=SAVED, checkpoint_dir=f"{tmp}/{name}"
    )
    trainer.fit(log=lambda line: None)


def _resume(rank, tmp, stage, wrote, world, bf16=False):
    suffix = "_bf16" if bf16 else ""
    name = f"s{stage}_{wrote}to{world}{suffix}"
    trainer = make_trainer(
        tmp,
        ds_config(stage=stage, bf16=bf16),
        epochs=EPOCHS,
        checkpoint_dir=f"{tmp}/ck_s{stage}_w{wrote}{suffix}",
        metrics_out=f"{tmp}/{name}.jsonl",
    )
    trainer.resume()
    assert trainer.start_epoch == SAVED and trainer.resumed.universal and not trainer.resumed.skipped
    assert trainer.resumed.manifest["world_size"] == wrote and trainer.resumed.manifest["zero_stage"] == stage
    trainer.fit(log=lambda line: None)
    if rank == 0:
        dump(tmp, f"{name}.json", _losses(f"{tmp}/{name}.jsonl"))


def _saves_at_2(rank, world, tmp):
    for stage in STAGES:
        _save(tmp, stage, world)
    _save(tmp, 2, world, bf16=True)


def _at_1(rank, world, tmp):
    """The reference, the saves at 1 rank and the resumes 2 -> 1."""
    reference = make_trainer(tmp, ds_config(stage=1), epochs=EPOCHS, metrics_out=f"{tmp}/reference.jsonl")
    reference.fit(log=lambda line: None)
    dump(tmp, "reference.json", _losses(f"{tmp}/reference.jsonl"))
    for stage in STAGES:
        _save(tmp, stage, world)
        _resume(rank, tmp, stage, 2, world)
    bf16 = make_trainer(tmp, ds_config(stage=2, bf16=True), epochs=EPOCHS, metrics_out=f"{tmp}/reference_bf16.jsonl")
    bf16.fit(log=lambda line: None)
    dump(tmp, "reference_bf16.json", _losses(f"{tmp}/reference_bf16.jsonl"))
    _resume(rank, tmp, 2, 2, world, bf16=True)


def _resumes_from(rank, world, tmp, wrote):
    for stage in STAGES:
        _resume(rank, tmp, stage, wrote, world)


def test_resume_at_another_world_size_continues_with_the_same_losses(tmp_path):
    write_random_graph(str(tmp_path))
    run(_saves_at_2, 2, tmp_path)
    run(_at_1, 1, tmp_path)
    run(_resumes_from, 2, tmp_path, 1)
    run(_resumes_from, 4, tmp_path, 2)
    reference = load(tmp_path, "reference.json")
    assert len(reference) == EPOCHS
    for stage in STAGES:
        for wrote, targets in MOVES.items():
            for world in targets:
                got = load(tmp_path, f"s{stage}_{wrote}to{world}.json")
                assert got == pytest.approx(reference[SAVED:], abs=1e-5), (stage, wrote, world, got, reference)
                assert os.path.isdir(tmp_path / f"ck_s{stage}_w{wrote}" / "epoch000001_universal")
    # bf16 (ZeRO-2, 2 -> 1): bf16 sums differ with the rank count, so only close to the 1-rank bf16 run
    # (within bf16's resolution, 2^-8 relative: measured up to 2.1e-3 on these losses of about 1.2)
    got, want = load(tmp_path, "s2_2to1_bf16.json"), load(tmp_path, "reference_bf16.json")
    assert got == pytest.approx(want[SAVED:], abs=4e-3), (got, want)
