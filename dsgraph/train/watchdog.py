"""Fault handling: no rank waits silently forever for a rank that died or hangs.

Two mechanisms, both bounded by the configured ``timeout_s``:

- a collective that fails (a peer closed its connection, or a gloo/NCCL operation on the default
  group timed out) raises in the training loop; ``is_peer_failure`` recognises it and the entry
  point prints ``peer_failure_message`` and exits;
- ``Watchdog``: a daemon thread that the loop pets (``beat``) at every epoch, evaluation and
  checkpoint; if no beat arrives for ``timeout_s`` (the rank is stuck in a collective on a group
  without that timeout, e.g. one that DeepSpeed created), it prints the same kind of message and ends
  the process with ``EXIT_PEER_FAILURE``. It arms at the first beat: set-up (whose length depends on
  the slowest rank's start) is bounded by the default group's timeout and by closed connections only.

Either way the job can be restarted from its last checkpoint with ``--resume``.
"""

from __future__ import annotations

import os
import sys
import threading
import time

EXIT_PEER_FAILURE = 3


def peer_failure_message(rank: int, timeout_s: float, detail: str) -> str:
    return (
        f"dsgraph: error (rank {rank}): another rank died or did not answer within {timeout_s:g} s ({detail}); "
        "the job stops. Restart it from the last checkpoint with --resume (set checkpoint_every to save them)."
    )


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
    """Ends this process (exit code ``EXIT_PEER_FAILURE``) when, after a first ``beat()``, no other
    comes for ``timeout_s`` seconds. Use as a context manager; ``what`` in ``beat`` names the phase."""

    def __init__(self, rank: int, timeout_s: float, poll_s: float | None = None):
        self.rank, self.timeout_s = rank, timeout_s
        self.poll_s = poll_s if poll_s is not None else min(1.0, timeout_s / 10)
        self._last, self._what = None, ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="dsgraph-watchdog", daemon=True)

    def beat(self, what: str) -> None:
        self._last, self._what = time.monotonic(), what

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            if self._last is None:
                continue
            silent = time.monotonic() - self._last
            if silent > self.timeout_s:
                detail = f"no progress for {silent:.0f} s during {self._what}"
                print(peer_failure_message(self.rank, self.timeout_s, detail), file=sys.stderr, flush=True)
                sys.stdout.flush()
                os._exit(EXIT_PEER_FAILURE)

    def __enter__(self) -> "Watchdog":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
