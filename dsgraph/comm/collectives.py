"""Collectives as autograd pairs: each backward is the dual of its forward.

- ``gather_rows``: all-gather of row blocks with uneven counts (the group's row split); backward
  reduce-scatters the gradient. ``gather_rows_padded`` leaves the rows in the padded layout the
  collective delivers (``padded_index`` maps global ids into it), so nothing is copied twice.
- ``nodes_to_heads`` / ``heads_to_nodes``: all-to-all between the node split [n_r, H, D] and the head
  split [N, H/P, D]; each one's backward is the other.
- ``exchange_rows``: uneven all-to-all of selected rows (a halo exchange); backward sends the
  gradients back along the same routes and accumulates them into the rows that were sent.
- ``start_exchange_rows``: the same exchange started asynchronously; ``wait()`` on the returned
  ``PendingRows`` before using the rows.
- ``start_ring_shift``: send a tensor to the next rank and receive one from the previous rank,
  asynchronously (blockwise strategies write their own backward with it; no autograd here).

Every function returns its input unchanged when the group has one rank. Tensors move through
deepspeed.comm so its comms logger sees them; time and bytes are counted in ``pg.stats``.
"""

from __future__ import annotations

import time
import warnings

import torch

# torch 2.13 prefers all_gather_single / reduce_scatter_single, which deepspeed.comm does not wrap yet.
warnings.filterwarnings("ignore", message=r".*`torch.distributed.(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated")

from dsgraph.comm.group import GraphParallelGroup


def _dist():
    import deepspeed.comm as dist

    return dist


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _all_gather_padded(x: torch.Tensor, pg: GraphParallelGroup) -> torch.Tensor:
    """[n, ...] on each rank -> [P * width, ...]: rank r's rows at [r * width, r * width + n_r)
    (width = the largest count; the rest of each slot is zero)."""
    width = max(pg.counts)
    send = x
    if x.shape[0] != width:
        send = x.new_zeros((width, *x.shape[1:]))
        send[: x.shape[0]] = x
    out = x.new_empty((width * pg.world_size, *x.shape[1:]))
    with pg.stats.record(x, _nbytes(send) * (pg.world_size - 1), "all_gather"):
        _dist().all_gather_into_tensor(out, send, group=pg.group)
    return out


def _reduce_scatter_padded(grad: torch.Tensor, pg: GraphParallelGroup) -> torch.Tensor:
    """[P * width, ...] (the padded layout) on each rank -> the sum over ranks of this rank's rows [n, ...]."""
    width = max(pg.counts)
    out = grad.new_empty((width, *grad.shape[1:]))
    with pg.stats.record(grad, _nbytes(out) * (pg.world_size - 1), "reduce_scatter"):
        _dist().reduce_scatter_tensor(out, grad, group=pg.group)
    return out[: pg.counts[pg.rank]]


class _GatherRowsPadded(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, pg):
        ctx.pg = pg
        return _all_gather_padded(x.contiguous(), pg)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_padded(grad.contiguous(), ctx.pg), None


def gather_rows_padded(x: torch.Tensor, pg: GraphParallelGroup) -> torch.Tensor:
    """All-gather into the padded layout [P * width, ...] (rank r's rows start at r * width; see
    ``padded_index``), with no copy to close the gaps. Backward: reduce-scatter of the gradient in
    that layout. One rank: x itself."""
    if pg.world_size == 1:
        return x
    return _GatherRowsPadded.apply(x, pg)


def padded_index(ids: torch.Tensor, pg: GraphParallelGroup) -> torch.Tensor:
    """Global row ids -> their rows in ``gather_rows_padded``'s layout (int64, ids' device)."""
    if pg.world_size == 1:
        return ids.long()
    starts = torch.tensor(pg.starts, dtype=torch.int64, device=ids.device)
    owner = torch.searchsorted(starts[1:], ids.long(), right=True)
    return ids.long() - starts[owner] + owner * max(pg.counts)


def _unpad(padded: torch.Tensor, pg: GraphParallelGroup) -> torch.Tensor:
    blocks = padded.view(pg.world_size, max(pg.counts), *padded.shape[1:])
    return torch.cat([blocks[r, :c] for r, c in enumerate(pg.counts)])


def gather_rows(x: torch.Tensor, pg: GraphParallelGroup) -> torch.Tensor:
    """All-gather: local rows [n, ...] (n = pg.counts[rank]) -> all rows [N, ...] in rank order.
    Backward: reduce-scatter of the full gradient back to [n, ...]."""
    if pg.world_size == 1:
        return x
    return _unpad(gather_rows_padded(x, pg), pg)


def _all_to_all(x: torch.Tensor, send: list[int], recv: list[int], pg: GraphParallelGroup) -> torch.Tensor:
    """Uneven all-to-all along dim 0: rows [sum(send), ...] -> [sum(recv), ...]."""
    out = x.new_empty((sum(recv), *x.shape[1:]))
    row_bytes = _nbytes(x) // max(x.shape[0], 1)
    with pg.stats.record(x, row_bytes * (sum(send) - send[pg.rank]), "all_to_all"):
        _dist().all_to_all_single(out, x.contiguous(), output_split_sizes=recv, input_split_sizes=send, group=pg.group)
    return out


def _nodes_to_heads(x_nHD: torch.Tensor, counts: list[int], pg: GraphParallelGroup) -> torch.Tensor:
    n, heads, dim = x_nHD.shape
    p = pg.world_size
    send_PnhD = x_nHD.reshape(n, p, heads // p, dim).transpose(0, 1).contiguous()
    return _all_to_all(send_PnhD.view(p * n, heads // p, dim), [n] * p, counts, pg)


def _heads_to_nodes(y_NhD: torch.Tensor, counts: list[int], pg: GraphParallelGroup) -> torch.Tensor:
    p, n = pg.world_size, counts[pg.rank]
    recv = _all_to_all(y_NhD, counts, [n] * p, pg)  # [P * n, h, D], block r holds heads of rank r
    _, h, dim = recv.shape
    return recv.view(p, n, h, dim).transpose(0, 1).reshape(n, p * h, dim)


class _NodesToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, pg):
        ctx.pg = pg
        return _nodes_to_heads(x, pg.counts, pg)

    @staticmethod
    def backward(ctx, grad):
        return _heads_to_nodes(grad.contiguous(), ctx.pg.counts, ctx.pg), None


class _HeadsToNodes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, pg):
        ctx.pg = pg
        return _heads_to_nodes(y.contiguous(), pg.counts, pg)

    @staticmethod
    def backward(ctx, grad):
        return _nodes_to_heads(grad.contiguous(), ctx.pg.counts, ctx.pg), None


def nodes_to_heads(x_nHD: torch.Tensor, pg: GraphParallelGroup) -> torch.Tensor:
    """All-to-all: node split [n, H, D] -> head split [N, H/P, D] (rank r gets heads
    [r*H/P, (r+1)*H/P) of every node). Backward: ``heads_to_nodes`` of the gradient."""
    if pg.world_size == 1:
        return x_nHD
    if x_nHD.shape[1] % pg.world_size:
        raise ValueError(f"nodes_to_heads: {x_nHD.shape[1]} heads do not split over {pg.world_size} ranks")
    return _NodesToHeads.apply(x_nHD, pg)


def heads_to_nodes(y_NhD: torch.Tensor, pg: GraphParallelGroup) -> torch.Tensor:
    """All-to-all: head split [N, H/P, D] -> node split [n, H, D].
    Backward: ``nodes_to_heads`` of the gradient."""
    if pg.world_size == 1:
        return y_NhD
    return _HeadsToNodes.apply(y_NhD, pg)


class _ExchangeRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, send_index, send_counts, recv_counts, pg):
        ctx.save_for_backward(send_index)
        ctx.num_rows, ctx.send_counts, ctx.recv_counts, ctx.pg = x.shape[0], send_counts, recv_counts, pg
        return _all_to_all(x.index_select(0, send_index), send_counts, recv_counts, pg)

    @staticmethod
    def backward(ctx, grad):
        (send_index,) = ctx.saved_tensors
        back = _all_to_all(grad.contiguous(), ctx.recv_counts, ctx.send_counts, ctx.pg)
        grad_x = grad.new_zeros((ctx.num_rows, *grad.shape[1:])).index_add_(0, send_index, back)
        return grad_x, None, None, None, None


def exchange_rows(
    x: torch.Tensor, send_index: torch.Tensor, send_counts: list[int], recv_counts: list[int], pg: GraphParallelGroup
) -> torch.Tensor:
    """Uneven all-to-all of selected rows: sends x[send_index] (grouped by destination rank, sizes
    ``send_counts``) and returns the [sum(recv_counts), ...] rows received, grouped by source rank.
    Backward: the gradients travel back and are summed into the rows that were sent."""
    if pg.world_size == 1:
        return x.index_select(0, send_index)
    return _ExchangeRows.apply(x, send_index, send_counts, recv_counts, pg)


class PendingRows:
    """An exchange in flight: ``wait()`` returns the received rows [sum(recv_counts), ...]."""

    def __init__(self, rows: torch.Tensor, work, keep_alive: torch.Tensor | None, pg: GraphParallelGroup):
        self._rows, self._work, self._keep_alive, self._pg = rows, work, keep_alive, pg

    def wait(self) -> torch.Tensor:
        if self._work is not None:
            began = time.perf_counter()
            with torch.profiler.record_function("dsgraph/comm/wait"):
                self._work.wait()
            self._pg.stats.add_time(time.perf_counter() - began)
            self._work = self._keep_alive = None
        return self._rows


class _StartExchangeRows(torch.autograd.Function):
    """Forward launches the all-to-all asynchronously and returns its (not yet filled) output; the
    caller must ``PendingRows.wait()`` before reading it. Backward is ``_ExchangeRows``' backward."""

    @staticmethod
    def forward(ctx, x, send_index, send_counts, recv_counts, pg, started):
        ctx.save_for_backward(send_index)
        ctx.num_rows, ctx.send_counts, ctx.recv_counts, ctx.pg = x.shape[0], send_counts, recv_counts, pg
        send = x.index_select(0, send_index).contiguous()
        out = x.new_empty((sum(recv_counts), *x.shape[1:]))
        row_bytes = _nbytes(x) // max(x.shape[0], 1)
        began = time.perf_counter()  # no device synchronisation here: it would wait for the exchange itself
        with torch.profiler.record_function("dsgraph/comm/exchange_rows"):
            work = _dist().all_to_all_single(
                out, send, output_split_sizes=recv_counts, input_split_sizes=send_counts, group=pg.group, async_op=True
            )
        pg.stats.add_time(time.perf_counter() - began)
        pg.stats.count(row_bytes * (sum(send_counts) - send_counts[pg.rank]))
        started.append((work, send))
        return out

    @staticmethod
    def backward(ctx, grad):
        return (*_ExchangeRows.backward(ctx, grad), None)


def start_exchange_rows(
    x: torch.Tensor, send_index: torch.Tensor, send_counts: list[int], recv_counts: list[int], pg: GraphParallelGroup
) -> PendingRows:
    """``exchange_rows`` started asynchronously, so local work can run while rows travel.
    Returns a ``PendingRows``; its ``wait()`` gives the [sum(recv_counts), ...] received rows (with
    autograd: the backward sends the gradients back, synchronously, and sums them into the sent rows).
    Issue no other collective on ``pg`` between the start and the wait."""
    if pg.world_size == 1:
        return PendingRows(x.index_select(0, send_index), None, None, pg)
    started: list = []
    rows = _StartExchangeRows.apply(x, send_index, send_counts, recv_counts, pg, started)
    work, send = started[0]
    return PendingRows(rows, work, send, pg)


def start_ring_shift(x: torch.Tensor, recv_shape: tuple[int, ...], pg: GraphParallelGroup, name: str = "ring_shift") -> PendingRows:
    """Sends ``x`` to rank (r + 1) % P and receives a tensor of ``recv_shape`` (x's dtype) from rank
    (r - 1) % P, asynchronously; ``wait()`` on the result gives the received tensor. Counted in
    ``pg.stats`` (bytes of ``x``). No autograd: callers that need gradients pass them on the same way."""
    dist = _dist()
    out = x.new_empty(recv_shape)
    send = x.contiguous()
    p, rank = pg.world_size, pg.rank
    peer = (lambda r: r) if pg.group is None else (lambda r: _torch_dist().get_global_rank(pg.group, r))
    ops = [dist.P2POp(dist.isend, send, peer((rank + 1) % p), pg.group),
           dist.P2POp(dist.irecv, out, peer((rank - 1) % p), pg.group)]  # fmt: skip
    began = time.perf_counter()
    with torch.profiler.record_function(f"dsgraph/comm/{name}"):
        works = dist.batch_isend_irecv(ops)
    pg.stats.add_time(time.perf_counter() - began)
    pg.stats.count(_nbytes(send))
    return PendingRows(out, _AllWorks(works), send, pg)


class _AllWorks:
    """Waits on every handle of a batch of point-to-point operations."""

    def __init__(self, works):
        self.works = works

    def wait(self) -> None:
        for work in self.works:
            work.wait()


def _torch_dist():
    import torch.distributed as tdist

    return tdist
