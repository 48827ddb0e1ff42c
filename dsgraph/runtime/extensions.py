"""JIT-built C++ extensions (DeepSpeed's ops): where they are built, how a CPU run avoids them, and
what a run stuck behind a build lock is waiting for.

torch builds an extension under ``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions/...``)
inside a ``lock`` file that the building process creates and removes; every other process waits,
silently and without a time limit, until the file is gone (``torch.utils.file_baton.FileBaton``).
A build that is stopped leaves the file behind, and from then on every run waits forever, even
when the op is already built (the check whether to rebuild happens behind the lock). DeepSpeed
rebuilds when include paths differ from the last build, so two checkouts or environments sharing
the default folder keep rebuilding each other's ops.
"""

from __future__ import annotations

import os
import sys

from dsgraph.runtime import procscan

BUILD_DIR_VAR = "TORCH_EXTENSIONS_DIR"


def use_environment_build_dir() -> str | None:
    """Builds extensions inside this Python environment (``sys.prefix``/torch_extensions) unless
    ``TORCH_EXTENSIONS_DIR`` is set or the environment is read-only, so another checkout or venv
    never rebuilds (or locks) this one's ops. Returns the folder set, or None."""
    if BUILD_DIR_VAR in os.environ or not os.access(sys.prefix, os.W_OK):
        return None
    os.environ[BUILD_DIR_VAR] = os.path.join(sys.prefix, "torch_extensions")
    return os.environ[BUILD_DIR_VAR]


def prefer_torch_adam(ds_config: dict) -> tuple[dict, bool]:
    """The config with ``"torch_adam": true`` added to an Adam/AdamW optimizer that does not choose.

    For CPU runs: DeepSpeed's default Adam there is FusedAdam, a C++ op JIT-built at start-up;
    ``torch.optim.Adam``/``AdamW`` compute the same update and need no build. A config that sets
    ``torch_adam`` (true or false) is left as it is. Returns (config, whether it changed)."""
    optimizer = ds_config.get("optimizer") or {}
    params = optimizer.get("params") or {}
    if str(optimizer.get("type", "")).lower() not in ("adam", "adamw") or "torch_adam" in params:
        return ds_config, False
    return {**ds_config, "optimizer": {**optimizer, "params": {**params, "torch_adam": True}}}, True


def waited_lock(thread_id: int) -> str | None:
    """The lock file that thread ``thread_id`` is waiting on inside ``FileBaton.wait`` (another
    process is building, or a stopped build left the lock), read from the thread's current stack."""
    baton_module = sys.modules.get("torch.utils.file_baton")
    if baton_module is None:  # torch never imported it: nothing can wait on a build lock
        return None
    wait_code = baton_module.FileBaton.wait.__code__
    frame = sys._current_frames().get(thread_id)
    while frame is not None:
        if frame.f_code is wait_code:
            return getattr(frame.f_locals.get("self"), "lock_file_path", None)
        frame = frame.f_back
    return None


def lock_message(lock: str) -> str:
    """What a run waiting on ``lock`` waits for, and how to end the wait."""
    op = os.path.basename(os.path.dirname(lock))
    holders = procscan.scan([lock]).users.get(os.path.abspath(lock))
    if holders:
        pids = ", ".join(str(p) for p in sorted(holders))
        return (
            f"waiting for the build of the C++ op '{op}' that process {pids} is running (lock file {lock}); "
            "let it finish, or raise timeout_s if builds take longer here"
        )
    return (
        f"waiting for the build lock {lock} of the C++ op '{op}', which no running process holds: a run stopped "
        f"during a build left it behind. Remove it and start again: rm {lock}"
    )


def stuck_build(thread_id: int) -> str | None:
    """For the watchdog: a description of the build lock ``thread_id`` waits on, or None."""
    lock = waited_lock(thread_id)
    return lock_message(lock) if lock else None
