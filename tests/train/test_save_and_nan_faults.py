"""Faults inside a run: a checkpoint save the disk refuses (an OSError(ENOSPC) injected into
DeepSpeed's writes on one rank; a read-only file system met by rank 0's manifest write) leaves the
previous checkpoint resumable and no temporary files, and the run continues or stops as
'checkpoint_failure' says; a NaN planted in one rank's loss at a chosen epoch is seen by both ranks
in the same step, and 'nonfinite' stops (naming the epoch, the rank and what was non-finite) or
rolls back (reloads, lowers the learning rate, skips the step)."""

from __future__ import annotations

import errno
import json
import os

import pytest

from dsgraph.train import checkpoint as ck
from dsgraph.train.nonfinite import NonFiniteError
from dsgraph.train.save_guard import CheckpointSaveError
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, make_trainer

SETTINGS = dict(epochs=6, checkpoint_every=2, keep_checkpoints=0, eval_every=100)  # saves after epochs 1, 3, 5
FULL_AT = 3  # the save after this epoch finds the disk full


def _rows(path, kind):
    with open(path) as f:
        return [row for row in map(json.loads, f) if row["kind"] == kind]


def _disk_full_on_rank1(trainer, rank):
    """From the save of epoch FULL_AT on, rank 1's optimizer-state writes raise ENOSPC (once per save)."""
    save = trainer.engine.checkpoint_engine.save

    def full(state_dict, path):
        if rank == 1 and ck.tag_of(FULL_AT) in path and "optim_states" in path:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return save(state_dict, path)

    trainer.engine.checkpoint_engine.save = full


def _disk_fills(rank, world, tmp, action):
    out = {}
    directory = f"{tmp}/{action}"
    trainer = make_trainer(
        tmp,
        ds_config(stage=2),
        checkpoint_dir=directory,
        metrics_out=f"{tmp}/{action}.jsonl",
        checkpoint_failure=action,
        **SETTINGS,
    )
    _disk_full_on_rank1(trainer, rank)
    try:
        trainer.fit(log=lambda line: None)
        out["stopped"] = None
    except CheckpointSaveError as err:
        out["stopped"] = str(err)
    out["listing"] = sorted(os.listdir(directory))
    resumed = make_trainer(tmp, ds_config(stage=2), checkpoint_dir=directory, checkpoint_failure=action, **SETTINGS)
    resumed.resume()
    out["resumed_from"] = resumed.resumed.path
    if rank == 0:
        out["events"] = _rows(f"{tmp}/{action}.jsonl", "event")
        out["epochs"] = [row["epoch"] for row in _rows(f"{tmp}/{action}.jsonl", "step")]
        dump(tmp, f"{action}.json", out)


@pytest.mark.slow
@pytest.mark.parametrize("action", ["continue", "stop"])
def test_a_full_disk_keeps_the_previous_checkpoint(tmp_path, action):
    run(_disk_fills, 2, tmp_path, action)
    got = load(tmp_path, f"{action}.json")
    assert not any(name.startswith(".") for name in got["listing"]), got["listing"]  # no temporary folder
    assert ck.tag_of(FULL_AT) not in got["listing"] and ck.tag_of(1) in got["listing"]
    assert got["events"] == [{"kind": "event", "event": "checkpoint_failed", "epoch": FULL_AT, "step": FULL_AT + 1}] * (
        action == "continue"
    )
    if action == "continue":  # trained on and saved again at the next interval
        assert got["stopped"] is None and got["epochs"] == list(range(6))
        assert got["resumed_from"].endswith(ck.tag_of(5))
    else:
        message = got["stopped"]
        assert f"checkpoint after epoch {FULL_AT} was not saved in {tmp_path / action}" in message
        assert "No space left on device (ENOSPC)" in message and " free of " in message
        assert f"the previous checkpoint {tmp_path / action / ck.tag_of(1)} is intact" in message
        assert got["epochs"] == list(range(FULL_AT + 1)) and got["resumed_from"].endswith(ck.tag_of(1))


def _read_only_manifest(rank, world, tmp):
    """The manifest of epoch FULL_AT's save (rank 0's own write, after DeepSpeed's) meets a read-only file system."""
    from dsgraph.train import manifest as mf

    write = mf.write

    def read_only(folder, manifest):
        if ck.tag_of(FULL_AT) in folder:
            raise OSError(errno.EROFS, "Read-only file system", os.path.join(folder, mf.MANIFEST + ".tmp"))
        return write(folder, manifest)

    mf.write = read_only
    trainer = make_trainer(tmp, ds_config(stage=1), checkpoint_dir=f"{tmp}/ro", **SETTINGS)
    trainer.fit(log=lambda line: None)
    dump(tmp, "ro.json", {"listing": sorted(os.listdir(f"{tmp}/ro")), "last": trainer.last_save[1]})


@pytest.mark.slow
def test_a_read_only_manifest_write_leaves_no_partial_checkpoint(tmp_path):
    run(_read_only_manifest, 1, tmp_path)
    got = load(tmp_path, "ro.json")
    tags = [name for name in got["listing"] if name.startswith("epoch") or name.startswith(".")]
    assert tags == [ck.tag_of(1), ck.tag_of(5)] and got["last"].endswith(ck.tag_of(5)), got


NAN_AT = 4


def _plant_nan(trainer, rank):
    """Rank 1's loss is NaN in the first step of epoch NAN_AT (once)."""
    losses, planted = trainer.task.losses, []

    def poisoned(logits, labels):
        out = losses(logits, labels)
        if rank == 1 and trainer.engine.global_steps == NAN_AT and not planted:
            planted.append(True)
            return (out[0] * float("nan"), *out[1:])
        return out

    trainer.task.losses = poisoned


def _nan(rank, world, tmp, action):
    out = {}
    trainer = make_trainer(
        tmp,
        ds_config(stage=2),
        checkpoint_dir=f"{tmp}/nan_{action}",
        metrics_out=f"{tmp}/nan_{action}.jsonl",
        nonfinite=action,
        nonfinite_lr_factor=0.25,
        **SETTINGS,
    )
    _plant_nan(trainer, rank)
    lr = trainer.engine.optimizer.param_groups[0]["lr"]
    try:
        trainer.fit(log=lambda line: None)
        out["stopped"] = None
    except NonFiniteError as err:
        out["stopped"] = str(err)
    out["lr_scale"], out["stored_lr"], out["lr"] = trainer.lr.factor, trainer.engine.optimizer.param_groups[0]["lr"], lr
    if rank == 0:
        out["events"] = _rows(f"{tmp}/nan_{action}.jsonl", "event")
        out["steps"] = [(row["epoch"], row["loss"]) for row in _rows(f"{tmp}/nan_{action}.jsonl", "step")]
    dump(tmp, f"nan_{action}_{rank}.json", out)


@pytest.mark.slow
@pytest.mark.parametrize("action", ["stop", "rollback"])
def test_a_nan_loss_stops_or_rolls_back_on_every_rank(tmp_path, action):
    run(_nan, 2, tmp_path, action)
    ranks = [load(tmp_path, f"nan_{action}_{r}.json") for r in range(2)]
    events = ranks[0]["events"]
    assert [(e["event"], e["action"], e["epoch"], e["ranks"]) for e in events] == [
        ("nonfinite", action, NAN_AT, [0, 1])
    ]
    epochs = [epoch for epoch, _ in ranks[0]["steps"]]
    if action == "stop":
        for got in ranks:
            assert f"non-finite training values at epoch {NAN_AT} (step {NAN_AT + 1}) on rank(s) 0, 1" in got["stopped"]
        # rank 1's loss was NaN; ZeRO's gradient norm, over both ranks, was not finite on both
        assert "rank 1: loss nan; gradient norm not finite" in ranks[1]["stopped"]
        assert "rank 0: gradient norm not finite (DeepSpeed skipped the optimizer step)" in ranks[0]["stopped"]
        assert epochs == list(range(NAN_AT + 1))
        return
    for got in ranks:
        assert got["stopped"] is None and got["lr_scale"] == 0.25 and got["stored_lr"] == got["lr"]
    # rolled back to the checkpoint after epoch 3, epoch 4's step skipped, then epoch 5 at a quarter of the rate
    assert epochs == [0, 1, 2, 3, 4, 5] and events[0]["lr_scale"] == 0.25
    assert all(loss == loss for _, loss in ranks[0]["steps"][NAN_AT + 1 :])
