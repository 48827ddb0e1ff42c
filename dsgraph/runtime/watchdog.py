"""Fault handling: no rank waits silently forever, at start-up or in training.

Two mechanisms, both bounded by the configured ``timeout_s``:

- a collective that fails (a peer closed its connection, or a gloo/NCCL operation on the default
  group timed out) raises in the training loop; ``is_peer_failure`` recognises it and the entry
  point prints ``peer_failure_message`` and exits;
- ``Watchdog``: a daemon thread that the entry point and the loop pet (``beat``) at every phase:
  each start-up step (importing DeepSpeed, joining the process group, loading the graph, building
  the engine and its ops, the first collective) and every epoch, evaluation and checkpoint. If no
  beat arrives for ``timeout_s`` (the rank is stuck in a collective on a group without that
  timeout, e.g. one that DeepSpeed created, or in set-up), it prints a message that names the phase
  and ends the process. It arms at the first beat; the entry point beats before importing DeepSpeed.
  When its ``diagnose`` callback knows why the rank is stuck (a build lock that a stopped build left
  behind, see ``dsgraph.runtime.extensions``), the message says that and how to fix it, and the exit
  code is ``EXIT_STUCK``; otherwise the cause is taken to be another rank (``EXIT_PEER_FAILURE``).

Either way a training job can be restarted from its last checkpoint with ``--resume``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

EXIT_PEER_FAILURE = 3
EXIT_STUCK = 2  # the cause is on this machine and the message names the fix (as for a bad config)


def peer_failure_message(rank: int | None, timeout_s: float, detail: str) -> str:
    return (
        f"dsgraph: error (rank {_rank_text(rank)}): another rank died or did not answer within {timeout_s:g} s "
        f"({detail}); "
        "the job stops. Restart it from the last checkpoint with --resume (set checkpoint_every to save them)."
    )


def stuck_message(rank: int | None, detail: str, cause: str) -> str:
    return f"dsgraph: error (rank {_rank_text(rank)}): {detail}: {cause}"


def _rank_text(rank: int | None) -> str:
    return "?" if rank is None else str(rank)


def is_peer_failure(err: BaseException) -> bool:
    """A collective failed because another rank is gone or silent (not a bug in this rank)."""
    import torch.distributed as dist

    if isinstance(err, getattr(dist, "DistError", ())):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(
        key in text for key in ("gloo", "nccl", "connection closed", "connection reset", "timed out", "broken pipe")
    )


class Watchdog:
    """Ends this process when, after a first ``beat()``, no other comes for ``timeout_s`` seconds.
    Use as a context manager; ``what`` in ``beat`` names the phase.

    ``rank`` may be None until the process group exists (set the attribute once it is known).
    ``diagnose()``, called when the watchdog fires, returns a description of what this rank is stuck
    on, or None. ``on_exit()`` runs just before the process ends (``os._exit`` skips atexit
    handlers and ``finally`` blocks), e.g. to remove the shared memory the rank created."""

    def __init__(
        self,
        rank: int | None,
        timeout_s: float,
        poll_s: float | None = None,
        diagnose: Callable[[], str | None] | None = None,
        on_exit: Callable[[], object] | None = None,
    ):
        self.rank, self.timeout_s = rank, timeout_s
        self.diagnose, self.on_exit = diagnose, on_exit
        self.poll_s = poll_s if poll_s is not None else min(1.0, timeout_s / 10)
        self._last, self._what = None, ""
        self.last_message = ""  # what it printed when it fired (for ``on_exit``)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="dsgraph-watchdog", daemon=True)

    def beat(self, what: str) -> None:
        self._last, self._what = time.monotonic(), what

    @property
    def phase(self) -> str:
        """The phase of the last beat (what this rank is doing)."""
        return self._what

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            if self._last is None:
                continue
            silent = time.monotonic() - self._last
            if silent > self.timeout_s:
                self._fire(f"no progress for {silent:.0f} s during {self._what}")

    def _fire(self, detail: str) -> None:
        cause = self._call(self.diagnose)
        if cause:
            message, code = stuck_message(self.rank, detail, cause), EXIT_STUCK
        else:
            message, code = peer_failure_message(self.rank, self.timeout_s, detail), EXIT_PEER_FAILURE
        print(message, file=sys.stderr, flush=True)
        sys.stdout.flush()
        self.last_message = message
        self._call(self.on_exit)
        os._exit(code)

    @staticmethod
    def _call(fn: Callable | None):
        """Runs a callback without letting its failure keep the process alive."""
        try:
            return fn() if fn is not None else None
        except Exception as err:  # the process ends anyway; say why the callback did not help
            print(f"dsgraph: watchdog callback {fn!r} failed: {err!r}", file=sys.stderr, flush=True)
            return None

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
