"""What a checkpoint save does when the disk refuses it (ENOSPC, EIO, a read-only folder).

``checkpoint.save`` writes into a temporary folder beside the checkpoints and renames it into place
only when every rank's files and the manifest are written and fsynced, so a failed save never
touches the previous checkpoint. The ranks must still run DeepSpeed's save (its collectives) to the
end together: ``GuardedWrites`` catches an OSError from DeepSpeed's file writes and records it
instead of raising it on one rank while the others wait at a barrier; the ranks then agree on the
first error. ``checkpoint_failure`` decides what the run does next: 'continue' (warn, keep
training, save again at the next interval) or 'stop' (exit with code 2 and the message).
"""

from __future__ import annotations

import os
import shutil

ACTIONS = ("continue", "stop")


class CheckpointSaveError(ValueError):
    """A save failed and ``checkpoint_failure`` is 'stop' (a ValueError: the command exits with code 2)."""


class GuardedWrites:
    """While active, OSErrors from ``engine.checkpoint_engine``'s writes are recorded in ``error``
    (the first one) instead of raised, and later writes are skipped."""

    def __init__(self, engine):
        self.engine, self.error = engine, None

    def __enter__(self) -> GuardedWrites:
        ce = self.engine.checkpoint_engine
        self._saved = {name: getattr(ce, name) for name in ("save", "makedirs")}
        for name, fn in self._saved.items():
            setattr(ce, name, self._guard(fn))
        return self

    def _guard(self, fn):
        def guarded(*args, **kwargs):
            if self.error is not None:
                return None
            try:
                return fn(*args, **kwargs)
            except OSError as err:
                self.error = err
                return None

        return guarded

    def __exit__(self, *exc) -> None:
        for name, fn in self._saved.items():
            setattr(self.engine.checkpoint_engine, name, fn)


def free_space(directory: str) -> str:
    """'F free of T' for the file system holding ``directory`` (or its nearest existing parent)."""
    path = os.path.abspath(directory)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        usage = shutil.disk_usage(path)
    except OSError as err:
        return f"free space unknown ({err.strerror})"
    return f"{_size(usage.free)} free of {_size(usage.total)}"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def describe(err: OSError | str) -> str:
    """An OSError as 'What (errno NAME) path', or the message already agreed on."""
    if isinstance(err, str):
        return err
    import errno

    code = f" ({errno.errorcode.get(err.errno, err.errno)})" if err.errno else ""
    where = f": {err.filename}" if err.filename else ""
    return f"{err.strerror or err}{code}{where}"


def failure_message(directory: str, epoch: int, error: str, previous: str | None, action: str) -> str:
    """The report of a failed save: the folder, the error, the free space, what is intact, what happens next."""
    kept = f"the previous checkpoint {previous} is intact" if previous else "no earlier checkpoint exists"
    then = (
        "training continues and saves again at the next interval (checkpoint_failure: 'continue')"
        if action == "continue"
        else "the run stops (checkpoint_failure: 'stop'); free space and resume with --resume"
    )
    return (
        f"checkpoint after epoch {epoch} was not saved in {directory}: {error}; {free_space(directory)}; {kept}; {then}"
    )
