"""Waiting for rank 0's work during loading: a deadline scaled with the work, and an error naming what was awaited."""

import time

import pytest

from dsgraph.graph.rank_wait import SECONDS_PER_EDGE, from_root, work_timeout
from tests.distributed import run


def test_the_wait_grows_with_the_edges():
    assert work_timeout(300, 0) == 300
    assert work_timeout(300, 10**8) == pytest.approx(300 + SECONDS_PER_EDGE * 10**8)


def test_a_control_plane_stand_in_gets_the_result_without_waiting():
    class OneRank:
        rank, world_size = 0, 1

        def bcast(self, obj, root=0):
            return obj

    beats = []
    assert from_root(OneRank(), True, lambda: 42, what="to count", timeout_s=1, heartbeat=beats.append) == 42
    assert beats and "rank 0 working to count" in beats[0]


def _wait_twice(rank, world_size, tmp):
    from dsgraph.comm.control import TorchControlPlane

    control, beats = TorchControlPlane(), []

    def slow(seconds):
        time.sleep(seconds)
        return "parts"

    # rank 0 works for 5 s, the others may wait 2.5 s: they fail, naming what they waited for
    try:
        from_root(
            control, rank == 0, lambda: slow(5), what="to partition the graph", timeout_s=2.5, heartbeat=beats.append
        )
        assert rank == 0, "a waiting rank should have given up after 2.5 s"
    except TimeoutError as err:
        assert rank != 0 and "waited" in str(err) and "for rank 0 to partition the graph" in str(err)
        assert any("waiting for rank 0 to partition the graph" in b for b in beats)
        assert control.bcast(None, root=0) == "parts"  # the broadcast rank 0 went on to
    # within the deadline, every rank gets rank 0's result
    got = from_root(control, rank == 0, lambda: slow(2), what="to partition", timeout_s=60, heartbeat=beats.append)
    assert got == "parts"


@pytest.mark.slow
def test_waiting_ranks_give_up_at_the_scaled_deadline_and_say_what_they_waited_for(tmp_path):
    run(_wait_twice, 2, tmp_path)
