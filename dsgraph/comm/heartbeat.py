"""Heartbeats on the control plane: a rank that stops (SIGSTOP, a frozen machine) or whose store
host stops answering is found by the others within ``timeout_s``, not after the collective timeout.

Every rank runs a daemon thread that, every ``timeout_s / 6`` seconds, writes a counter and its
current phase ("epoch 5", "checkpoint after epoch 9", ...) under its own key in the job's key-value
store (the TCP store behind torch.distributed's rendezvous, reached at ``MASTER_ADDR:MASTER_PORT``
through a connection of its own), then reads every other rank's; a second thread judges. A peer
whose counter has not changed for ``timeout_s`` seconds of this rank's clock (no clocks are
compared), or a store that does not answer for that long (a store call can block), is reported once
through ``on_silent(message)``; the entry point
prints it, records it for the restart summary and ends the rank. The thread needs no GIL-holding
progress from the training loop, so a rank stuck in a collective keeps beating (the watchdog's
``timeout_s`` covers that case) while a stopped process does not.

Keys carry a per-attempt prefix that rank 0 chooses (``new_prefix``), so a restarted job never
reads the previous attempt's beats.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

BEATS_PER_TIMEOUT = 6


def new_prefix() -> str:
    """A fresh key prefix; rank 0's is shared with every rank of the attempt (``main._name_run``)."""
    return f"dsgraph/heartbeat/{uuid.uuid4().hex}/"


def silent_message(rank: int, peer: int, silent_s: float, timeout_s: float, phase: str) -> str:
    return (
        f"dsgraph: error (rank {rank}): rank {peer} sent no heartbeat for {silent_s:.0f} s (bound {timeout_s:g} s, "
        f"heartbeat_timeout_s); its last phase: {phase or 'unknown'}. The job stops"
    )


def store_silent_message(rank: int, silent_s: float, timeout_s: float, where: str) -> str:
    return (
        f"dsgraph: error (rank {rank}): the job's store at {where} did not answer for {silent_s:.0f} s (bound "
        f"{timeout_s:g} s, heartbeat_timeout_s): the process hosting it (rank 0 or the launcher) is stopped or gone. "
        "The job stops"
    )


class Heartbeats:
    """Beats for ``rank`` of ``world`` and watches the others; use as a context manager.
    ``phase()`` names what this rank is doing; ``store`` is any object with torch's Store
    ``set``/``multi_get``/``check`` (default: a new client of the job's TCP store)."""

    def __init__(
        self,
        rank: int,
        world: int,
        timeout_s: float,
        prefix: str,
        phase: Callable[[], str],
        on_silent: Callable[[str], object],
        store=None,
    ):
        self.rank, self.world, self.timeout_s, self.prefix = rank, world, timeout_s, prefix
        self.phase, self.on_silent = phase, on_silent
        self.interval_s = timeout_s / BEATS_PER_TIMEOUT
        self._store, self._count = store, 0
        self._seen: dict[int, tuple[int, float, str]] = {}  # peer -> (its counter, when it changed here, its phase)
        self._started = self._store_ok = time.monotonic()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._exchange_forever, name="dsgraph-heartbeat", daemon=True),
            threading.Thread(target=self._judge_forever, name="dsgraph-heartbeat-judge", daemon=True),
        ]

    def _connect(self):
        from torch.distributed import TCPStore

        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        wait = timedelta(seconds=max(self.interval_s, 1.0))
        return TCPStore(host, port, is_master=False, timeout=wait, wait_for_workers=False)

    def _key(self, rank: int) -> str:
        return f"{self.prefix}{rank}"

    def _exchange_forever(self) -> None:
        self.exchange(time.monotonic())  # the first beat at once: a rank stopped early is named with its phase
        while not self._stop.wait(self.interval_s):
            self.exchange(time.monotonic())

    def _judge_forever(self) -> None:
        while not self._stop.wait(self.interval_s):
            message = self.verdict(time.monotonic())
            if message is not None:
                self.on_silent(message)
                return

    def exchange(self, now: float) -> None:
        """One beat and one read of the peers' beats (may block while the store's host is stopped:
        ``verdict``, on another thread, then finds the store silent)."""
        try:
            if self._store is None:
                self._store = self._connect()
            self._count += 1
            self._store.set(self._key(self.rank), json.dumps([self._count, self.phase()]))
            peers = [r for r in range(self.world) if r != self.rank]
            present = [r for r in peers if self._store.check([self._key(r)])]
            values = self._store.multi_get([self._key(r) for r in present]) if present else []
        except Exception:  # the store's host does not answer (stopped, gone) or the connection broke
            return
        self._store_ok = now
        for peer, raw in zip(present, values):
            count, phase = json.loads(bytes(raw).decode())
            if peer not in self._seen or self._seen[peer][0] != count:
                self._seen[peer] = (count, now, phase)

    def verdict(self, now: float) -> str | None:
        """The message about the store or the first peer silent for over ``timeout_s``, else None.
        A peer is judged only on reads that succeeded: while the store is silent, its beats cannot
        arrive, so the store (rank 0 stopped, say) is named, not the peers it cut off."""
        if now - self._store_ok > self.timeout_s:
            where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
            return store_silent_message(self.rank, now - self._store_ok, self.timeout_s, where)
        read_until = min(now, self._store_ok)
        for peer in range(self.world):
            count, since, phase = self._seen.get(peer, (0, self._started, "start-up (no beat yet)"))
            if peer != self.rank and read_until - since > self.timeout_s:
                return silent_message(self.rank, peer, now - since, self.timeout_s, phase)
        return None

    def __enter__(self) -> Heartbeats:
        self._started = time.monotonic()
        self._store_ok = self._started
        if self.world > 1:
            for thread in self._threads:
                thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
