"""A producer-consumer prefetch queue that decouples batch preparation from training.

A background thread calls ``produce(0), produce(1), ...`` and puts the results, in order, on a
``queue.Queue(maxsize=depth)``; the training loop takes them and only waits when the queue is
empty. ``depth = 0`` means no background work: each batch is produced in the loop itself, so the
loop waits the whole preparation time. Either way the wait of each batch is measured.
The heavy parts of preparation (numpy sorting and indexing, torch gathers) release the GIL, so a
thread overlaps with the training step without a second process.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


class Prefetcher:
    """Iterates ``produce(i)`` for i in range(count), prepared up to ``depth`` items ahead.

    Use as a context manager (or call ``close``) so the worker stops if the loop ends early.
    ``waits`` holds the seconds the loop waited for each item; an exception in ``produce`` is
    raised in the loop at the item that failed. ``finish_on_close``: a loop that ends early lets
    the worker produce (and drop) every item it could have started by then, the ones taken plus
    ``depth + 1``: a ``produce`` that joins collectives then runs as often on every rank, wherever
    each rank's worker was when its loop ended at the same item.
    """

    def __init__(self, produce: Callable[[int], Any], count: int, depth: int, *, finish_on_close: bool = False):
        if depth < 0:
            raise ValueError(f"prefetch depth must be >= 0, got {depth}")
        self.produce, self.count, self.depth = produce, count, depth
        self.finish_on_close = finish_on_close
        self._limit = count  # items the worker produces (lowered by close with finish_on_close)
        self.waits: list[float] = []
        self._stop = threading.Event()
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        if depth > 0:
            self._queue = queue.Queue(maxsize=depth)
            self._thread = threading.Thread(target=self._work, name="dsgraph-prefetch", daemon=True)
            self._thread.start()

    def _put(self, item) -> bool:
        """Queues ``item``; after close, whether the worker goes on (it drops the item then)."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return self.finish_on_close

    def _work(self) -> None:
        i = 0
        while i < self._limit:
            try:
                item = self.produce(i)
            except BaseException as err:  # handed to the consumer, raised there
                self._put(_Failure(err))
                return
            if not self._put(item):
                return
            i += 1
        self._put(_DONE)

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.count):
            start = time.perf_counter()
            item = self.produce(i) if self._queue is None else self._queue.get()
            self.waits.append(time.perf_counter() - start)
            if isinstance(item, _Failure):
                raise item.error
            yield item

    @property
    def last_wait(self) -> float:
        return self.waits[-1] if self.waits else 0.0

    def close(self) -> None:
        """Stops the worker (it finishes the item in hand, or with ``finish_on_close`` the items it
        could have started) and waits for it."""
        if self.finish_on_close:
            self._limit = min(self.count, len(self.waits) + self.depth + 1)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
