"""Checkpoint integrity: the manifest makes a checkpoint complete; --resume skips a damaged or
unfinished newest checkpoint (every kind of file), warns naming the file and the problem, resumes
from the previous one with the uninterrupted run's losses, and stops with a message naming the
folder when nothing is usable; a save killed halfway leaves the previous checkpoint usable;
keep_checkpoints deletes the oldest; the fp32 export equals the model."""

from __future__ import annotations

import io
import json
import os
import shutil

import pytest
import torch

from dsgraph.train import checkpoint as ck
from dsgraph.train import manifest as mf
from dsgraph.train.universal import export_fp32
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, make_trainer, write_random_graph

EPOCHS = 4
SETTINGS = dict(epochs=EPOCHS, checkpoint_every=2, keep_checkpoints=0, eval_every=100)  # saves after epochs 1 and 3
MODEL = "mp_rank_00_model_states.pt"
OPTIM = "zero_pp_rank_0_mp_rank_00_optim_states.pt"


def _losses(path):
    with open(path) as f:
        return [row["loss"] for row in map(json.loads, f) if row["kind"] == "step"]


def _fake_checkpoint(directory, epoch, payload=b"x" * 100) -> str:
    folder = os.path.join(directory, ck.tag_of(epoch))
    os.makedirs(folder)
    with open(os.path.join(folder, "a.pt"), "wb") as f:
        f.write(payload)
    files = mf.describe(folder, mf.list_files(folder))
    mf.write(
        folder,
        {
            "format_version": 1,
            "kind": "deepspeed",
            "epoch": epoch,
            "world_size": 1,
            "zero_stage": 1,
            "dtype": "float32",
            "files": files,
        },
    )
    return folder


def test_manifest_names_each_problem(tmp_path):
    folder = _fake_checkpoint(str(tmp_path), 1)
    files = mf.read(folder)["files"]
    assert mf.check_files(folder, files, list(files)) == []
    path = os.path.join(folder, "a.pt")
    with open(path, "r+b") as f:
        f.write(b"y")
    assert "sha256 checksum mismatch" in mf.check_files(folder, files, list(files))[0]
    os.truncate(path, 10)
    assert "is truncated or changed (10 bytes, the manifest says 100)" in mf.check_files(folder, files, list(files))[0]
    os.remove(path)
    assert mf.check_files(folder, files, list(files)) == [f"{path} is missing"]
    with open(os.path.join(folder, mf.MANIFEST), "w") as f:
        f.write("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        mf.read(folder)
    os.remove(os.path.join(folder, mf.MANIFEST))
    with pytest.raises(ValueError, match=r"dsgraph_manifest.json is missing \(the save did not finish\)"):
        mf.read(folder)
    assert not os.path.exists(os.path.join(folder, mf.MANIFEST + ".tmp"))


def test_keep_checkpoints_deletes_the_oldest_and_unfinished_saves(tmp_path):
    d = str(tmp_path)
    for epoch in (1, 3, 5, 7):
        _fake_checkpoint(d, epoch)
    os.makedirs(os.path.join(d, "epoch000002"))  # a killed save (no manifest), older than the newest complete
    os.makedirs(os.path.join(d, "epoch000008"))  # newer than every complete one: left alone
    os.makedirs(os.path.join(d, "epoch000001_universal"))  # the conversion of a checkpoint that goes
    ck.prune(d, keep=2)
    assert sorted(os.listdir(d)) == ["epoch000005", "epoch000007", "epoch000008"]
    ck.prune(d, keep=0)
    assert sorted(os.listdir(d)) == ["epoch000005", "epoch000007", "epoch000008"]


def _damage(folder: str, case: str) -> str:
    """Damages one file of the checkpoint ``folder`` (or the checkpoint dir's ``latest``); returns
    the problem text the warning must contain."""
    if case == "model_truncated":
        os.truncate(os.path.join(folder, MODEL), os.path.getsize(os.path.join(folder, MODEL)) // 2)
        return f"{os.path.join(folder, MODEL)} is truncated or changed"
    if case == "optim_corrupted":
        with open(os.path.join(folder, OPTIM), "r+b") as f:
            f.seek(os.path.getsize(os.path.join(folder, OPTIM)) // 2)
            f.write(b"\xde\xad\xbe\xef")
        return f"{os.path.join(folder, OPTIM)}: sha256 checksum mismatch"
    if case == "manifest_garbage":
        with open(os.path.join(folder, mf.MANIFEST), "w") as f:
            f.write('{"files": ')
        return f"{os.path.join(folder, mf.MANIFEST)} is not valid JSON"
    if case == "manifest_missing":
        os.remove(os.path.join(folder, mf.MANIFEST))
        return f"{os.path.join(folder, mf.MANIFEST)} is missing"
    assert case == "latest_garbage"  # DeepSpeed's own pointer: dsgraph does not read it
    with open(os.path.join(os.path.dirname(folder), "latest"), "w") as f:
        f.write("epoch999999\x00garbage")
    return ""


DAMAGE = ("model_truncated", "optim_corrupted", "manifest_garbage", "manifest_missing", "latest_garbage")


def _kill_before_manifest(rank, world, tmp):
    """The run dies after every file of epoch 3's checkpoint is written, before its manifest."""
    write = mf.write

    def dying_write(folder, manifest):
        if "epoch000003" in folder:
            os._exit(17)
        return write(folder, manifest)

    mf.write = dying_write
    make_trainer(tmp, ds_config(stage=1), checkpoint_dir=f"{tmp}/killed_manifest", **SETTINGS).fit(
        log=lambda line: None
    )


def _kill_mid_file(rank, world, tmp):
    """The run dies halfway through writing epoch 3's optimizer states."""
    trainer = make_trainer(tmp, ds_config(stage=1), checkpoint_dir=f"{tmp}/killed_file", **SETTINGS)
    engine_save = trainer.engine.checkpoint_engine.save

    def dying_save(state_dict, path):
        if "epoch000003" in path and path.endswith("optim_states.pt"):
            buffer = io.BytesIO()
            torch.save(state_dict, buffer)
            with open(path, "wb") as f:
                f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            os._exit(17)
        return engine_save(state_dict, path)

    trainer.engine.checkpoint_engine.save = dying_save
    trainer.fit(log=lambda line: None)


def _resumes(rank, world, tmp):
    reference = make_trainer(
        tmp, ds_config(stage=1), checkpoint_dir=f"{tmp}/ck", metrics_out=f"{tmp}/reference.jsonl", **SETTINGS
    )
    reference.fit(log=lambda line: None)
    exported = export_fp32(f"{tmp}/ck/epoch000003")
    model = reference.engine.module.state_dict()
    assert set(exported) == set(model)
    exact = all(torch.equal(exported[k], model[k].float()) for k in model)
    results = {"reference": _losses(f"{tmp}/reference.jsonl"), "export_exact": exact}
    cases = {case: f"{tmp}/{case}" for case in DAMAGE}
    cases.update(killed_manifest=f"{tmp}/killed_manifest", killed_file=f"{tmp}/killed_file")
    for case, directory in cases.items():
        if case in DAMAGE:
            shutil.copytree(f"{tmp}/ck", directory)
            problem = _damage(f"{directory}/epoch000003", case)
        else:
            problem = "dsgraph_manifest.json is missing (the save did not finish)"
        warnings = []
        trainer = make_trainer(
            tmp, ds_config(stage=1), checkpoint_dir=directory, metrics_out=f"{tmp}/{case}.jsonl", **SETTINGS
        )
        trainer.resumed = ck.load_latest(trainer.engine, trainer.cfg, warn=warnings.append)
        state = trainer.resumed.client_state
        trainer.start_epoch, trainer.best = state["epoch"] + 1, state["best"]
        if trainer.start_epoch < EPOCHS:
            trainer.fit(log=lambda line: None)
        results[case] = {
            "start": trainer.start_epoch,
            "warnings": warnings,
            "problem": problem,
            "losses": _losses(f"{tmp}/{case}.jsonl") if trainer.start_epoch < EPOCHS else [],
        }
    # nothing usable: both checkpoints damaged
    shutil.copytree(f"{tmp}/ck", f"{tmp}/none_usable")
    _damage(f"{tmp}/none_usable/epoch000003", "model_truncated")
    _damage(f"{tmp}/none_usable/epoch000001", "optim_corrupted")
    trainer = make_trainer(tmp, ds_config(stage=1), checkpoint_dir=f"{tmp}/none_usable", **SETTINGS)
    with pytest.raises(ValueError) as err:
        trainer.resume()
    results["none_usable"] = str(err.value)
    dump(tmp, "integrity.json", results)


@pytest.mark.slow
def test_damaged_or_unfinished_newest_checkpoint_resumes_from_the_previous(tmp_path):
    write_random_graph(str(tmp_path))
    for fn in (_kill_before_manifest, _kill_mid_file):
        with pytest.raises(Exception, match="exit code 17"):
            run(fn, 1, tmp_path)
    for case in ("killed_manifest", "killed_file"):  # the killed save's files stay in its temporary folder
        names = set(os.listdir(tmp_path / case))
        assert {".epoch000003.partial", "epoch000001"} <= names and "epoch000003" not in names, (case, names)
    run(_resumes, 1, tmp_path)
    results = load(tmp_path, "integrity.json")
    reference = results["reference"]
    assert len(reference) == EPOCHS and results["export_exact"]
    for case in (*DAMAGE, "killed_manifest", "killed_file"):
        got = results[case]
        if case == "latest_garbage":  # DeepSpeed's 'latest' is not trusted: the newest checkpoint is used
            assert got["start"] == EPOCHS and got["warnings"] == [], got
            continue
        if case.startswith("killed"):  # a killed save never named its folder as a checkpoint: nothing to skip
            assert got["start"] == 2 and got["warnings"] == [], (case, got)
            assert got["losses"] == pytest.approx(reference[2:], abs=1e-6), (case, got, reference)
            continue
        assert got["start"] == 2, (case, got)
        assert got["problem"] in got["warnings"][0] and "epoch000003" in got["warnings"][0], (case, got)
        assert (
            "resuming from the newest complete checkpoint" in got["warnings"][-1]
            and "epoch000001" in got["warnings"][-1]
        )
        assert got["losses"] == pytest.approx(reference[2:], abs=1e-6), (case, got, reference)
    message = results["none_usable"]
    assert "no usable checkpoint to resume from" in message and str(tmp_path / "none_usable") in message
    assert "epoch000003" in message and "epoch000001" in message and "sha256 checksum mismatch" in message
