"""Checkpoints through DeepSpeed (every rank takes part), with dsgraph's loop state in client state,
made complete by a manifest and resumable at any world size.

Layout of ``checkpoint_dir``: one folder per checkpoint, ``epochNNNNNN`` (DeepSpeed's tag), holding
DeepSpeed's files and ``dsgraph_manifest.json`` (``manifest.py``), written last. A save writes into
``.epochNNNNNN.partial`` and renames it into place when every file is written and fsynced; a save
the disk refuses leaves the previous checkpoints untouched (``save_guard.py``). A checkpoint is
complete only with its manifest; ``--resume`` takes the newest checkpoint whose manifest and files
check out (it does not trust DeepSpeed's ``latest`` file), warns about each newer one it skips and
why, and stops with a message naming the folder when none is usable. Loading at another world size
(or another dtype) converts the checkpoint once into a universal checkpoint beside it,
``epochNNNNNN_universal`` with a manifest of its own (``universal.py``), and loads that.
After each save, complete checkpoints beyond ``keep_checkpoints`` are deleted, oldest first.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field

import torch

from dsgraph.train import manifest as mf
from dsgraph.train import save_guard, universal

TAG_RE = re.compile(r"^epoch(\d{6,})$")
UNIVERSAL_SUFFIX = "_universal"


def tag_of(epoch: int) -> str:
    return f"epoch{epoch:06d}"


def universal_dir(directory: str, tag: str) -> str:
    return os.path.join(directory, tag + UNIVERSAL_SUFFIX)


def due(cfg, epoch: int) -> bool:
    """Whether the loop saves a periodic checkpoint after ``epoch``."""
    return bool(cfg.checkpoint_every) and (epoch + 1) % cfg.checkpoint_every == 0


# --- the collectives this module needs (none without a process group: the CLI, one process) -----
def _rank_world() -> tuple[int, int]:
    import torch.distributed as tdist

    if tdist.is_available() and tdist.is_initialized():
        return tdist.get_rank(), tdist.get_world_size()
    return 0, 1


def _barrier() -> None:
    if _rank_world()[1] > 1:
        import deepspeed.comm as dist

        dist.barrier()


def _gather(value) -> list:
    """Every rank's ``value``, in rank order, on every rank."""
    rank, world = _rank_world()
    if world == 1:
        return [value]
    import torch.distributed as tdist

    out = [None] * world
    tdist.all_gather_object(out, value)
    return out


def _from_rank0(value):
    """Rank 0's ``value`` on every rank."""
    return _gather(value)[0]


# --- saving -----------------------------------------------------------------------------------
def engine_facts(engine) -> dict:
    """What a checkpoint of this engine records about the run's layout."""
    return {
        "world_size": _rank_world()[1],
        "zero_stage": int(engine.zero_optimization_stage()),
        "dtype": "bfloat16" if engine.bfloat16_enabled() else ("float16" if engine.fp16_enabled() else "float32"),
    }


def save(engine, cfg, epoch: int, best: dict, extra_state: dict | None = None) -> str | None:
    """Writes the checkpoint of ``epoch`` on every rank into a temporary folder, then (rank 0) its
    manifest, and renames the folder into place; then deletes checkpoints beyond ``keep_checkpoints``.
    Returns the checkpoint folder. A save the disk refuses (``save_guard.py``) leaves the previous
    checkpoints as they were and no temporary files; it returns None with ``checkpoint_failure``
    'continue' (rank 0 warns) and raises ``CheckpointSaveError`` on every rank with 'stop'."""
    directory, tag = cfg.checkpoint_dir, tag_of(epoch)
    folder, partial = os.path.join(directory, tag), partial_dir(directory, tag)
    rank, world = _rank_world()
    error = _first_error(_attempt(lambda: _fresh_folder(directory, partial)) if rank == 0 else None)
    if error is None:
        state = {**_client_state(cfg, epoch, best), **(extra_state or {})}
        with save_guard.GuardedWrites(engine) as guard:
            engine.save_checkpoint(directory, tag=os.path.basename(partial), client_state=state, save_latest=False)
        error = _first_error(guard.error and save_guard.describe(guard.error))
    files = {}
    if error is None:
        rels = _from_rank0(mf.list_files(partial) if rank == 0 else None)
        shares = _gather(_attempt(lambda: _describe_and_sync(partial, rels[rank::world])))
        error = next((share for share in shares if isinstance(share, str)), None)
        for share in shares if error is None else ():
            files.update(share)
    if error is None and rank == 0:
        manifest = _manifest(engine, cfg, tag, epoch, files)
        error = _attempt(lambda: _commit(directory, partial, folder, manifest))
    error = _first_error(error)
    if error is not None:
        return _failed(cfg, epoch, partial, error)
    if rank == 0:
        prune(directory, cfg.keep_checkpoints)
    _barrier()
    return folder


def partial_dir(directory: str, tag: str) -> str:
    """The temporary folder a save of ``tag`` writes before it is complete (hidden; ``prune`` deletes strays)."""
    return os.path.join(directory, "." + tag + ".partial")


def _client_state(cfg, epoch: int, best: dict) -> dict:
    from deepspeed.checkpoint.constants import (
        UNIVERSAL_CHECKPOINT_INFO,
        UNIVERSAL_CHECKPOINT_VERSION_KEY,
        UNIVERSAL_CHECKPOINT_VERSION_VALUE,
    )

    state = {
        "epoch": epoch,
        "seed": cfg.seed,
        "best": best,
        "torch_rng_state": torch.get_rng_state(),
        # ZeRO-1/2 checkpoints convert to universal ones only with this entry (ds_to_universal checks it)
        UNIVERSAL_CHECKPOINT_INFO: {UNIVERSAL_CHECKPOINT_VERSION_KEY: UNIVERSAL_CHECKPOINT_VERSION_VALUE},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda_rng_state"] = torch.cuda.get_rng_state()
    return state


def _manifest(engine, cfg, tag: str, epoch: int, files: dict) -> dict:
    settings = json.loads(json.dumps(mf.resume_settings(cfg.to_dict())))
    return {
        "format_version": mf.FORMAT_VERSION,
        "kind": "deepspeed",
        "tag": tag,
        "epoch": epoch,
        "global_steps": int(engine.global_steps),
        **engine_facts(engine),
        "seed": cfg.seed,
        "resume_settings": settings,
        "config_hash": mf.config_hash(settings),
        "files": files,
    }


def _attempt(fn):
    """``fn()``'s result, or the OSError it raised as one line (``save_guard.describe``)."""
    try:
        return fn()
    except OSError as err:
        return save_guard.describe(err)


def _first_error(error: str | None) -> str | None:
    """Collective: the first rank's error, or None when no rank has one."""
    return next((e for e in _gather(error) if e), None)


def _fresh_folder(directory: str, partial: str) -> None:
    shutil.rmtree(partial, ignore_errors=True)  # an earlier attempt's files
    os.makedirs(partial)


def _describe_and_sync(folder: str, rels: list[str]) -> dict:
    """``mf.describe`` of ``rels``, each file fsynced first (the rename that completes the save must
    not reach the disk before the files do)."""
    for rel in rels:
        fd = os.open(os.path.join(folder, rel), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return mf.describe(folder, rels)


def _commit(directory: str, partial: str, folder: str, manifest: dict) -> None:
    """Rank 0: the manifest into ``partial``, then ``partial`` renamed to ``folder`` (an older save of
    the same epoch is moved aside first and deleted after), the folder fsynced, DeepSpeed's ``latest``."""
    mf.write(partial, manifest)
    old = partial + ".old"
    if os.path.isdir(folder):
        shutil.rmtree(old, ignore_errors=True)
        os.replace(folder, old)
    try:
        os.replace(partial, folder)
    except OSError:
        if os.path.isdir(old):
            os.replace(old, folder)  # the older save of this epoch stays
        raise
    shutil.rmtree(old, ignore_errors=True)
    latest = os.path.join(directory, "latest")
    with open(latest + ".tmp", "w") as f:
        f.write(os.path.basename(folder))
    os.replace(latest + ".tmp", latest)
    mf.fsync_folder(directory)


def _failed(cfg, epoch: int, partial: str, error: str) -> None:
    """Every rank after a failed save: rank 0 removes the temporary folder and reports; then the
    configured action."""
    rank, _ = _rank_world()
    if rank == 0:
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(partial + ".old", ignore_errors=True)
    tags = [
        t for _, t in list_tags(cfg.checkpoint_dir) if os.path.isfile(os.path.join(cfg.checkpoint_dir, t, mf.MANIFEST))
    ]
    previous = os.path.join(cfg.checkpoint_dir, tags[0]) if tags else None
    message = save_guard.failure_message(cfg.checkpoint_dir, epoch, error, previous, cfg.checkpoint_failure)
    _barrier()  # the temporary folder is gone before any rank goes on
    if cfg.checkpoint_failure == "stop":
        raise save_guard.CheckpointSaveError(message)
    _warn(message)
    return None


def list_tags(directory: str) -> list[tuple[int, str]]:
    """(epoch, tag) of every checkpoint folder in ``directory``, newest first (complete or not)."""
    if not os.path.isdir(directory):
        return []
    found = [(int(m.group(1)), name) for name in os.listdir(directory) if (m := TAG_RE.match(name))]
    return sorted((e, t) for e, t in found if os.path.isdir(os.path.join(directory, t)))[::-1]


def prune(directory: str, keep: int) -> list[str]:
    """Deletes complete checkpoints beyond the newest ``keep`` (0: none), incomplete ones older than
    the newest complete one (saves that were killed), and universal conversions whose source is
    gone. Returns the deleted folders."""
    tags = list_tags(directory)
    complete = [(e, t) for e, t in tags if os.path.isfile(os.path.join(directory, t, mf.MANIFEST))]
    doomed = [t for _, t in complete[keep:]] if keep else []
    if complete:
        doomed += [t for e, t in tags if e < complete[0][0] and (e, t) not in complete]
    deleted = []
    for tag in doomed:
        for path in (os.path.join(directory, tag), universal_dir(directory, tag)):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
                deleted.append(path)
    alive = {t for _, t in list_tags(directory)}
    for name in os.listdir(directory):
        orphan = name.endswith(UNIVERSAL_SUFFIX) and name[: -len(UNIVERSAL_SUFFIX)] not in alive
        if orphan or name.endswith(".partial"):
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
            deleted.append(os.path.join(directory, name))
    return deleted


# --- verifying and loading ----------------------------------------------------------------------
def verify(folder: str) -> tuple[dict | None, list[str]]:
    """(manifest, problems) of a checkpoint folder, checked by every rank together (each hashes a
    share of the files; every rank gets the same answer)."""
    rank, world = _rank_world()
    try:
        manifest, problems = mf.read(folder), []
    except ValueError as err:
        manifest, problems = None, [str(err)]
    if manifest is not None:
        problems = mf.check_files(folder, manifest["files"], sorted(manifest["files"])[rank::world])
    problems = [p for share in _gather(problems) for p in share]
    return (None if problems else manifest), problems


@dataclass
class Resumed:
    """What ``load_latest`` loaded: the folder, its client state, and the newer checkpoints skipped
    (one line each: the folder and what was wrong with it)."""

    path: str
    client_state: dict
    manifest: dict
    skipped: list[str] = field(default_factory=list)
    universal: bool = False


def load_latest(engine, cfg, heartbeat=None, warn=None) -> Resumed:
    """Loads the newest complete checkpoint in ``cfg.checkpoint_dir`` into ``engine`` (on every
    rank). FileNotFoundError if there is none, ValueError if none is usable or the usable one was
    made with other settings (the message names the folder and the problem)."""
    heartbeat = heartbeat or (lambda what: None)
    warn = warn or _warn
    directory = cfg.checkpoint_dir
    tags = list_tags(directory)
    if not tags:
        raise FileNotFoundError(
            f"{directory}: no checkpoint to resume from (no epochNNNNNN folder; set checkpoint_every)"
        )
    skipped = []
    for _, tag in tags:
        folder = os.path.join(directory, tag)
        heartbeat(f"verifying checkpoint {folder}")
        manifest, problems = verify(folder)
        if manifest is None:
            more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
            skipped.append(f"{folder}: {problems[0]}{more}")
            continue
        _check_settings(folder, manifest, cfg)
        for line in skipped:
            warn(f"skipped checkpoint {line}")
        if skipped:
            warn(f"resuming from the newest complete checkpoint, {folder}")
        return _load(engine, directory, tag, manifest, skipped, heartbeat)
    raise ValueError(f"{directory}: no usable checkpoint to resume from: " + "; ".join(skipped))


def _warn(message: str) -> None:
    if _rank_world()[0] == 0:
        print(f"dsgraph: warning: {message}", file=sys.stderr, flush=True)


def _check_settings(folder: str, manifest: dict, cfg) -> None:
    if manifest.get("seed") != cfg.seed:
        raise ValueError(f"{folder}: checkpoint was made with seed {manifest.get('seed')}, this run uses {cfg.seed}")
    want = json.loads(json.dumps(mf.resume_settings(cfg.to_dict())))
    have = manifest.get("resume_settings", want)
    changed = [f"{k} {have.get(k)!r} -> {want[k]!r}" for k in want if have.get(k) != want[k]]
    if changed:
        raise ValueError(
            f"{folder}: checkpoint was made with other settings ({'; '.join(changed)}); resume with the "
            "checkpoint's settings, or start a new run in another checkpoint_dir"
        )


def _load(engine, directory: str, tag: str, manifest: dict, skipped: list[str], heartbeat) -> Resumed:
    facts = engine_facts(engine)
    folder = os.path.join(directory, tag)
    if manifest["zero_stage"] != facts["zero_stage"]:
        raise ValueError(
            f"{folder}: checkpoint was written with ZeRO stage {manifest['zero_stage']}, this run uses stage "
            f"{facts['zero_stage']}; resume with stage {manifest['zero_stage']} (at any world size), or export "
            "the model with `dsgraph checkpoint export`"
        )
    same = all(manifest[k] == facts[k] for k in ("world_size", "dtype")) or facts["zero_stage"] == 0
    if same:
        path, state = engine.load_checkpoint(directory, tag=tag)
    else:
        heartbeat(f"converting {folder} to a universal checkpoint")
        udir = _ensure_universal(directory, tag)
        path, state = universal.load(engine, directory, os.path.basename(udir))
    if path is None or state is None:
        raise ValueError(f"{folder}: DeepSpeed could not load the checkpoint")
    torch.set_rng_state(state["torch_rng_state"])
    if "cuda_rng_state" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda_rng_state"])
    return Resumed(path=folder, client_state=state, manifest=manifest, skipped=skipped, universal=not same)


def _ensure_universal(directory: str, tag: str) -> str:
    """Collective: the universal checkpoint of ``tag``, converted by rank 0 unless a complete one
    exists. Every rank gets the folder, or the same ValueError."""
    out = universal_dir(directory, tag)
    error = None
    if _rank_world()[0] == 0:
        try:
            existing = mf.read(out)
            files = existing["files"]
            stale = mf.check_files(out, files, sorted(files)) or existing.get("kind") != "universal"
        except ValueError:
            stale = True
        if stale:
            try:
                source = os.path.join(directory, tag)
                print(f"dsgraph: converting {source} to a universal checkpoint ({out})", flush=True)
                universal.convert(source, out)
            except ValueError as err:
                error = str(err)
    error = _from_rank0(error)
    if error:
        raise ValueError(error)
    return out
