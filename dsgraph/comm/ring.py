"""A ring shift: send a tensor to the next rank and receive one from the previous rank, asynchronously
(blockwise strategies such as ag_ring pass K/V blocks and their gradients around with it; no autograd)."""

from __future__ import annotations

import time

import torch

from dsgraph.comm.alltoall import PendingRows
from dsgraph.comm.group import GraphParallelGroup
from dsgraph.comm.util import dist, global_rank, nbytes


class _AllWorks:
    """Waits on every handle of a batch of point-to-point operations."""

    def __init__(self, works):
        self.works = works

    def wait(self) -> None:
        for work in self.works:
            work.wait()


def start_ring_shift(
    x: torch.Tensor, recv_shape: tuple[int, ...], pg: GraphParallelGroup, name: str = "ring_shift"
) -> PendingRows:
    """Sends ``x`` to rank (r + 1) % P and receives a tensor of ``recv_shape`` (x's dtype) from rank
    (r - 1) % P, asynchronously; ``wait()`` on the result gives the received tensor. Counted in
    ``pg.stats`` (bytes of ``x``)."""
    d = dist()
    out = x.new_empty(recv_shape)
    send = x.contiguous()
    p, rank = pg.world_size, pg.rank
    ops = [
        d.P2POp(d.isend, send, global_rank(pg, (rank + 1) % p), pg.group),
        d.P2POp(d.irecv, out, global_rank(pg, (rank - 1) % p), pg.group),
    ]
    began = time.perf_counter()
    with torch.profiler.record_function(f"dsgraph/comm/{name}"):
        works = d.batch_isend_irecv(ops)
    pg.stats.add_time(time.perf_counter() - began)
    pg.stats.count(nbytes(send))
    return PendingRows(lambda: out, _AllWorks(works), send, pg)
