"""Prefetch queue: order, bounded depth, errors, synchronous depth 0."""

import threading
import time

import pytest

from dsgraph.modes.sampled import Prefetcher


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_items_arrive_in_order_and_every_wait_is_measured(depth):
    with Prefetcher(lambda i: i * i, 7, depth) as items:
        assert list(items) == [i * i for i in range(7)]
        assert len(items.waits) == 7 and all(w >= 0 for w in items.waits)


def test_the_worker_runs_at_most_depth_items_ahead():
    produced = []
    lock = threading.Lock()

    def produce(i):
        with lock:
            produced.append(i)
        return i

    with Prefetcher(produce, 20, depth=2) as items:
        it = iter(items)
        assert next(it) == 0
        time.sleep(0.3)  # give the worker every chance to run ahead
        # item 0 consumed, 2 queued, one more may be produced and blocked on the full queue
        assert len(produced) <= 1 + 2 + 1, produced


def test_a_slow_producer_shows_up_as_wait_and_prefetch_hides_it():
    def produce(i):
        time.sleep(0.05)
        return i

    waits = {}
    for depth in (0, 4):
        with Prefetcher(produce, 6, depth) as items:
            for _ in items:
                time.sleep(0.1)  # the "training step" is slower than preparation
            waits[depth] = sum(items.waits[1:])
    assert waits[0] >= 5 * 0.05 * 0.9
    assert waits[4] < waits[0] / 2, waits


def test_an_error_in_the_producer_is_raised_in_the_loop():
    def produce(i):
        if i == 2:
            raise RuntimeError("bad batch")
        return i

    for depth in (0, 2):
        got = []
        with pytest.raises(RuntimeError, match="bad batch"), Prefetcher(produce, 5, depth) as items:
            for item in items:
                got.append(item)
        assert got == [0, 1]


def test_closing_early_stops_the_worker():
    items = Prefetcher(lambda i: i, 1000, depth=2)
    assert next(iter(items)) == 0
    items.close()
    assert not items._thread.is_alive()
    with pytest.raises(ValueError, match="depth"):
        Prefetcher(lambda i: i, 1, depth=-1)


def test_closing_early_with_finish_on_close_produces_what_the_worker_could_have_started():
    """Every rank's worker then runs ``produce`` as often (a produce that joins collectives)."""
    for stall in (False, True):
        produced = []

        def produce(i, stall=stall, produced=produced):
            produced.append(i)
            if stall:
                time.sleep(0.01)
            return i

        items = Prefetcher(produce, 1000, depth=3, finish_on_close=True)
        it = iter(items)
        assert [next(it), next(it)] == [0, 1]
        items.close()
        assert not items._thread.is_alive() and produced == list(range(2 + 3 + 1))
    items = Prefetcher(lambda i: i, 4, depth=3, finish_on_close=True)  # never past the count
    assert next(iter(items)) == 0
    items.close()
