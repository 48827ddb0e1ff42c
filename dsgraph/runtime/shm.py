"""DeepSpeed's CPU shared-memory all-reduce: kept out of training runs, and its leftovers removed.

On the CPU accelerator, ``deepspeed.init_distributed`` builds ``TorchBackend``, whose constructor
JIT-builds the ``deepspeed_shm_comm`` C++ op (1-3 minutes on first use, under a lock file that a
stopped build leaves behind) and, when every rank is local (``LOCAL_SIZE`` equals the world size, as
under the deepspeed launcher), maps one ~69 MB file per rank,
``/dev/shm/deepspeed_allreduce_buffer_{uid}_{MASTER_ADDR}_{MASTER_PORT}_{rank}``. DeepSpeed never
unlinks it, so every CPU run leaves one per rank, and a rank that dies before creating its file
leaves the others spinning inside the op (holding the GIL, out of reach of any Python timer).

Training never uses the op: it serves only ``inference_all_reduce`` (AutoTP inference); training's
collectives go through torch.distributed (gloo). DeepSpeed has no setting that skips it, but
``build_shm_op`` (deepspeed/comm/torch.py) returns None, building and mapping nothing, for an op that
``deepspeed.ops.__compatible_ops__`` marks incompatible; that dict is DeepSpeed's per-process
record of which ops may be built (deepspeed/ops/__init__.py caches it once so that edits persist).
``disable_shm_allreduce`` sets that entry before ``init_distributed``; nothing is monkeypatched, and
``inference_all_reduce`` falls back to torch.distributed's all_reduce by DeepSpeed's own logic.

Should a buffer exist anyway (the op was initialised before dsgraph could say no), each rank removes
its own at exit (``remove_own_buffer``), and a later run removes the buffers that no live process
holds or maps (``sweep_dead_buffers``).
"""

from __future__ import annotations

import dataclasses
import os

from dsgraph.runtime import procscan

SHM_DIR = "/dev/shm"
BUFFER_PREFIX = "deepspeed_allreduce_buffer_"  # SHM_BUFFER_NAME in deepspeed/ops/csrc/cpu/comm/shm.cpp


def disable_shm_allreduce() -> bool:
    """Keeps ``deepspeed.init_distributed`` from building and initialising the shm op (call before
    it); True when this accelerator has the op (the CPU one), False when there was nothing to stop."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().get_op_builder("ShareMemCommBuilder")
    if builder is None:
        return False
    deepspeed.ops.__compatible_ops__[builder.NAME] = False
    return True


def own_buffer(rank: int, shm_dir: str = SHM_DIR) -> str:
    """The file DeepSpeed's shm op creates for ``rank`` of this job (named as in shm.cpp)."""
    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    return os.path.join(shm_dir, f"{BUFFER_PREFIX}{os.getuid()}_{addr}_{port}_{rank}")


def remove_own_buffer(rank: int, shm_dir: str = SHM_DIR) -> bool:
    """Unlinks this rank's buffer if it exists (peers that mapped it keep their mapping); never
    raises, so it is safe on every exit path. True if a file was removed."""
    try:
        os.unlink(own_buffer(rank, shm_dir))
        return True
    except OSError:
        return False


@dataclasses.dataclass
class Freed:
    """What ``sweep_dead_buffers`` removed (``files``) and kept because a live process uses them or
    could not be inspected (``kept``)."""

    files: int = 0
    bytes: int = 0
    kept: int = 0

    def message(self, shm_dir: str = SHM_DIR) -> str:
        line = (
            f"dsgraph: removed {self.files} DeepSpeed all-reduce buffer(s) of finished runs from {shm_dir}, "
            f"{self.bytes / 1e6:.0f} MB freed"
        )
        return line + (f"; kept {self.kept} that live processes use" if self.kept else "")


def sweep_dead_buffers(shm_dir: str = SHM_DIR) -> Freed:
    """Removes this user's DeepSpeed all-reduce buffers in ``shm_dir`` that no live process holds
    open or maps (``procscan``), and reports what that freed.

    Why the scan is a proof: a buffer is mode 0600 and its name carries the uid of the ranks that
    created it, and every rank opens (and keeps open) the names built from its own uid, so only
    this user's DeepSpeed ranks can use this user's buffers. Those are ordinary processes that
    their owner can inspect; the processes ``procscan`` cannot read (other users', non-dumpable
    ones) cannot be among them. Other users' buffers are left alone."""
    try:
        names = [n for n in os.listdir(shm_dir) if n.startswith(BUFFER_PREFIX)]
    except FileNotFoundError:
        return Freed()
    sizes = {}
    for name in names:
        path = os.path.join(shm_dir, name)
        try:
            st = os.stat(path)
        except FileNotFoundError:  # removed meanwhile
            continue
        if st.st_uid == os.geteuid():
            sizes[path] = st.st_size
    freed = Freed()
    usage = procscan.scan(list(sizes)) if sizes else None
    for path, size in sizes.items():
        if usage.in_use(path):
            freed.kept += 1
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:  # another run's sweep was faster
            continue
        freed.files, freed.bytes = freed.files + 1, freed.bytes + size
    return freed
