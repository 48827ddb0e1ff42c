"""Work one rank does during loading while the others wait for it (a partition computed on rank 0).

The job's collective timeout (``timeout_s``, 300 s by default) suits a collective, not rank 0
running METIS over a large graph. ``from_root`` lets rank 0 work, beating its heartbeat so its
watchdog sees progress, while the other ranks wait outside any collective for at most
``work_timeout`` (the job's timeout plus an allowance per edge), beating too; a wait past it fails
with a message that says what they waited for. Then the result moves in one quick broadcast.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from dsgraph.comm.control import wait_for_root

SECONDS_PER_EDGE = 20e-6  # the waiting ranks' allowance per edge of rank 0's work (METIS: a few us per edge)
BEAT_S = 1.0


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
