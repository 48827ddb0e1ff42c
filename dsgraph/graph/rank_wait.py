"""Work one rank does during loading while the others wait for it (a partition computed on rank 0).

The job's collective timeout (``timeout_s``, 300 s by default) suits a collective, not rank 0
running METIS over a large graph. ``from_root`` lets rank 0 work, beating its heartbeat so its
watchdog sees progress, while the other ranks wait outside any collective for at most
``work_timeout`` (the job's timeout plus an allowance per edge), beating too; a wait past it fails
with a message that says what they waited for (``wait_for_root``, through torch's key-value store or
MPI messages, not a collective). Then the result moves in one quick broadcast.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

SECONDS_PER_EDGE = 20e-6  # the waiting ranks' allowance per edge of rank 0's work (METIS: a few us per edge)
BEAT_S = 1.0
READY_POLL_S = 1.0  # how often a waiting rank looks for the root's ready signal (and beats)
READY_TAG = 7141  # MPI tag of the root's ready messages


def work_timeout(base_s: float, num_edges: int) -> float:
    """Seconds the other ranks wait for rank 0's work on a graph of ``num_edges`` edges."""
    return float(base_s) + SECONDS_PER_EDGE * int(num_edges)


def from_root(control, is_root: bool, compute: Callable[[], object], *, what: str, timeout_s: float, heartbeat):
    """``compute()`` run on the root (``is_root``), its result on every rank; the others wait at most
    ``timeout_s`` seconds (``work_timeout``), then raise TimeoutError naming ``what`` (for example
    'to partition the graph with metis')."""
    result = None
    try:
        if is_root:
            with beating(heartbeat, f"start-up: rank 0 working {what}"):
                result = compute()
    finally:  # a failing root still says it is done, so the others fail at the broadcast, not at the deadline
        wait_for_root(
            control,
            0,
            timeout_s=timeout_s,
            what=what,
            poll=lambda: heartbeat(f"start-up: waiting for rank 0 {what} (at most {timeout_s:.0f} s)"),
        )
    return control.bcast(result, root=0)


@contextlib.contextmanager
def beating(heartbeat, phase: str):
    """Calls ``heartbeat(phase)`` about once a second from a helper thread while the block runs."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(BEAT_S):
            heartbeat(phase)

    heartbeat(phase)
    thread = threading.Thread(target=beat, name="dsgraph-beat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def wait_for_root(control, root: int, *, timeout_s: float, what: str, poll=lambda: None) -> None:
    """Collective: ``root`` says it is ready; every other rank waits at most ``timeout_s`` seconds for
    it (calling ``poll`` about once a second), then raises TimeoutError naming ``what`` it waited for.
    Through torch.distributed's key-value store (control plane 'torch') or MPI point-to-point messages
    on COMM_WORLD ('mpi'); another control plane (a test's stand-in) does not wait."""
    kind = getattr(control, "name", None)
    if control.world_size == 1 or kind not in ("torch", "mpi"):
        return
    control.ready_calls = getattr(control, "ready_calls", 0) + 1  # the same count on every rank
    if kind == "torch":
        from torch.distributed import distributed_c10d

        store, key = distributed_c10d._get_default_store(), f"dsgraph/ready/{control.ready_calls}"
        if control.rank == root:
            store.set(key, b"1")
            return
        ready = lambda: _store_has(store, key)  # noqa: E731
    else:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        if control.rank == root:
            for r in range(control.world_size):
                if r != root:
                    comm.send(control.ready_calls, dest=r, tag=READY_TAG)
            return
        ready = lambda: _mpi_has(comm, root)  # noqa: E731
    began = time.monotonic()
    while not ready():  # each look takes about READY_POLL_S
        waited = time.monotonic() - began
        if waited > timeout_s:
            raise TimeoutError(
                f"rank {control.rank} waited {waited:.0f} s (the limit for this step, scaled with its work) for "
                f"rank {root} {what}; rank {root} is still working, stuck or dead"
            )
        poll()


def _store_has(store, key: str) -> bool:
    from datetime import timedelta

    try:
        store.wait([key], timedelta(seconds=READY_POLL_S))
        return True
    except RuntimeError:  # DistStoreError: not set within the poll interval
        return False


def _mpi_has(comm, root: int) -> bool:
    if comm.iprobe(source=root, tag=READY_TAG):
        comm.recv(source=root, tag=READY_TAG)
        return True
    time.sleep(READY_POLL_S)
    return False
