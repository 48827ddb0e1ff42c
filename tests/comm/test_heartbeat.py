"""Heartbeats without processes: an in-memory store and a hand-moved clock (the end-to-end SIGSTOP
cases are in tests/train/test_restarts.py)."""

from __future__ import annotations

import pytest

from dsgraph.comm.heartbeat import Heartbeats


class DictStore:
    """The three Store calls Heartbeats makes; ``down`` makes every call fail like a stopped host."""

    def __init__(self):
        self.data, self.down = {}, False

    def _up(self):
        if self.down:
            raise TimeoutError("store timed out")

    def set(self, key, value):
        self._up()
        self.data[key] = value.encode()

    def check(self, keys):
        self._up()
        return all(k in self.data for k in keys)

    def multi_get(self, keys):
        self._up()
        return [self.data[k] for k in keys]


def _ranks(world: int, store: DictStore, timeout_s: float = 6.0) -> list[Heartbeats]:
    phases = {r: f"epoch {r}" for r in range(world)}
    return [
        Heartbeats(r, world, timeout_s, "p/", lambda r=r: phases[r], lambda m: None, store=store) for r in range(world)
    ]


def test_live_ranks_are_never_reported():
    store = DictStore()
    ranks = _ranks(3, store)
    start = ranks[0]._started
    for t in range(0, 60):
        for hb in ranks:
            hb.exchange(start + t)
        assert all(hb.verdict(start + t) is None for hb in ranks), t


def test_a_silent_rank_is_named_with_its_phase_after_the_bound():
    store = DictStore()
    ranks = _ranks(3, store)
    start = ranks[0]._started
    for t in range(3):
        for hb in ranks:
            hb.exchange(start + t)
    # rank 2 stops beating at t=2; the others go on. Rank 0 (which reads before rank 2 writes in each
    # round) sees rank 2's last new beat at t=3, and names it once that is over 6 s old
    for t in range(3, 12):
        for hb in ranks[:2]:
            hb.exchange(start + t)
        message = ranks[0].verdict(start + t)
        if t - 3 <= 6:
            assert message is None, (t, message)
        else:
            assert "rank 2 sent no heartbeat for 7 s (bound 6 s" in message and "epoch 2" in message, message
            return
    pytest.fail("rank 2 was never reported")


def test_a_store_that_stops_answering_is_reported(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1234")
    store = DictStore()
    hb = _ranks(2, store)[1]
    start = hb._started
    store.down = True
    hb.exchange(start + 1)
    assert hb.verdict(start + 5) is None
    assert "the job's store at 10.0.0.1:1234 did not answer" in hb.verdict(hb._store_ok + 6.5)


def test_a_stopped_store_host_is_named_not_the_peer_whose_beats_it_held(monkeypatch):
    """Rank 0 hosts the store and stops just after a beat that rank 1 read twice (a late beat on busy
    cores): rank 0's beat is older than the store's last answer, and the store must still be named."""
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    store = DictStore()
    rank0, rank1 = _ranks(2, store)
    start = rank1._started
    rank0.exchange(start)
    rank1.exchange(start + 0.5)  # sees rank 0's beat 1
    rank1.exchange(start + 1.5)  # rank 0 was late: beat 1 again; the store answered at 1.5
    store.down = True  # rank 0 stops: no more beats, no more answers
    for t in (2.5, 3.5, 4.5, 5.5, 6.5, 7.0):
        rank1.exchange(start + t)
        assert rank1.verdict(start + t) is None, t  # rank 0's beat is 6.5 s old at t=7, the store's answer 5.5 s
    message = rank1.verdict(start + 7.6)
    assert "the job's store at 127.0.0.1:29500 did not answer for 6 s" in message, message


def test_a_rank_that_never_beats_is_reported_as_in_start_up():
    store = DictStore()
    hb = _ranks(2, store)[0]
    hb.exchange(hb._started)
    # the store answers (this rank's own beats), but rank 1 never wrote one
    hb._store_ok = hb._started + 10
    assert "rank 1 sent no heartbeat" in hb.verdict(hb._started + 7) and "start-up" in hb.verdict(hb._started + 7)
