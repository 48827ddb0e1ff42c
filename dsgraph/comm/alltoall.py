"""All-to-alls as autograd pairs: between the node split and the head split (GP-A2A), and of
selected rows (a halo exchange), whose backward sends the gradients back along the same routes.

- ``nodes_to_heads`` / ``heads_to_nodes``: node split [n_r, H, D] <-> head split [N, H/P, D];
  each one's backward is the other (``start_*`` versions run asynchronously).
- ``edges_to_heads``: the same from the edge split of a per-edge, per-head tensor (a score bias
  [e_r, H], the in-edges of rank r's rows) to its head split [E, H/P], with the ranks' edge counts
  in place of their row counts; it travels as it is (no codec). Its backward is the way back.
- ``start_exchange_rows``: uneven all-to-all of rows x[send_index], started asynchronously so
  local work can run while they travel; ``wait()`` gives the received rows. In backward the
  gradients travel back the same way, overlapped with the backward of what ran in between.
  ``exchange_rows`` is the same, waited for at once.

With a codec (``compress.py``) the forward rows travel compressed and are restored on arrival;
gradients travel in the compute dtype unless a gradient codec is given.
"""

from __future__ import annotations

import time

import torch

from dsgraph.comm.compress import Codec
from dsgraph.comm.group import GraphParallelGroup
from dsgraph.comm.util import dist, nbytes

PLAIN = Codec()


def _all_to_all(x, send: list[int], recv: list[int], pg: GraphParallelGroup, codec: Codec = PLAIN, async_op=False):
    """Uneven all-to-all along dim 0: rows [sum(send), ...] -> [sum(recv), ...] payload rows (decode
    them with the codec); with ``async_op`` also returns the work handle."""
    payload = codec.encode(x).contiguous()
    out = payload.new_empty((sum(recv), *payload.shape[1:]))
    row_bytes = nbytes(payload) // max(payload.shape[0], 1)
    began = time.perf_counter()  # no device synchronisation: an async exchange must not wait for itself
    with torch.profiler.record_function("dsgraph/comm/all_to_all"):
        work = dist().all_to_all_single(
            out, payload, output_split_sizes=recv, input_split_sizes=send, group=pg.group, async_op=async_op
        )
    pg.stats.add_time(time.perf_counter() - began)
    pg.stats.count(row_bytes * (sum(send) - send[pg.rank]))
    return (out, work, payload) if async_op else out


def _head_split_send(x_nHD, pg: GraphParallelGroup, counts=None):
    """[n, H, D] -> the send buffer [P * n, H/P, D] (block r: the heads rank r gets), and its splits;
    ``counts``: the rows of every rank (default: the group's row split)."""
    n, heads, dim = x_nHD.shape
    p = pg.world_size
    send = x_nHD.reshape(n, p, heads // p, dim).transpose(0, 1).contiguous().view(p * n, heads // p, dim)
    return send, [n] * p, list(pg.counts if counts is None else counts)


def _node_split(recv_PnhD, pg: GraphParallelGroup, counts=None):
    """The received [P * n, h, D] (block r: rank r's heads of this rank's rows) -> [n, P * h, D]."""
    p, n = pg.world_size, (pg.counts if counts is None else counts)[pg.rank]
    _, h, dim = recv_PnhD.shape
    return recv_PnhD.view(p, n, h, dim).transpose(0, 1).reshape(n, p * h, dim)


def _nodes_to_heads(x_nHD, pg: GraphParallelGroup, codec: Codec, counts=None) -> torch.Tensor:
    send, splits, recv = _head_split_send(x_nHD, pg, counts)
    return codec.decode(_all_to_all(send, splits, recv, pg, codec), send)


def _heads_to_nodes(y_NhD, pg: GraphParallelGroup, codec: Codec, counts=None) -> torch.Tensor:
    counts = list(pg.counts if counts is None else counts)
    n = counts[pg.rank]
    recv = codec.decode(_all_to_all(y_NhD.contiguous(), counts, [n] * pg.world_size, pg, codec), y_NhD)
    return _node_split(recv, pg, counts)


class _Exchange(torch.autograd.Function):
    """``there(x)`` in forward and ``back(grad)`` in backward: nodes->heads and heads->nodes are each
    other's adjoint, so each one's backward is the other. ``counts``: the rows of every rank (None:
    the group's row split; the edge counts for a per-edge tensor)."""

    @staticmethod
    def forward(ctx, x, there, back, pg, codec, grad_codec, counts=None):
        ctx.back, ctx.pg, ctx.grad_codec, ctx.counts = back, pg, grad_codec, counts
        return there(x, pg, codec, counts)

    @staticmethod
    def backward(ctx, grad):
        return ctx.back(grad.contiguous(), ctx.pg, ctx.grad_codec, ctx.counts), None, None, None, None, None, None


def nodes_to_heads(
    x_nHD: torch.Tensor, pg: GraphParallelGroup, codec: Codec = PLAIN, grad_codec: Codec = PLAIN
) -> torch.Tensor:
    """All-to-all: node split [n, H, D] -> head split [N, H/P, D] (rank r gets heads
    [r*H/P, (r+1)*H/P) of every node). Backward: ``heads_to_nodes`` of the gradient."""
    if pg.world_size == 1:
        return x_nHD
    if x_nHD.shape[1] % pg.world_size:
        raise ValueError(f"nodes_to_heads: {x_nHD.shape[1]} heads do not split over {pg.world_size} ranks")
    return _Exchange.apply(x_nHD, _nodes_to_heads, _heads_to_nodes, pg, codec, grad_codec)


def heads_to_nodes(
    y_NhD: torch.Tensor, pg: GraphParallelGroup, codec: Codec = PLAIN, grad_codec: Codec = PLAIN
) -> torch.Tensor:
    """All-to-all: head split [N, H/P, D] -> node split [n, H, D]. Backward: ``nodes_to_heads``."""
    if pg.world_size == 1:
        return y_NhD
    return _Exchange.apply(y_NhD, _heads_to_nodes, _nodes_to_heads, pg, codec, grad_codec)


def edges_to_heads(x_eH: torch.Tensor, edge_counts: list[int], pg: GraphParallelGroup) -> torch.Tensor:
    """All-to-all of a per-edge, per-head tensor: edge split [e_r, H] (the in-edges of rank r's rows,
    e_r = ``edge_counts[r]``) -> head split [E, H/P] (every edge in rank order, so CSR order of the
    whole graph, for rank r's heads). Backward: the gradient goes the way back (head split -> edge split)."""
    if pg.world_size == 1:
        return x_eH
    if x_eH.shape[1] % pg.world_size:
        raise ValueError(f"edges_to_heads: {x_eH.shape[1]} heads do not split over {pg.world_size} ranks")
    return _Exchange.apply(x_eH[..., None], _nodes_to_heads, _heads_to_nodes, pg, PLAIN, PLAIN, list(edge_counts))[
        ..., 0
    ]


class _GradExchange:
    """The backward of one row exchange, in two halves: ``start`` (in the backward of the received
    rows) sends their gradients back asynchronously; ``finish`` (in the backward of the sent rows)
    waits and sums them into the rows that were sent. Autograd runs the nodes made between the
    forward's start and wait (the interior rows' attention) in between, so the gradients travel
    while that backward computes."""

    def __init__(self, like: torch.Tensor, send_index, send_counts, recv_counts, pg, codec, grad_codec):
        self.like, self.send_index, self.pg = like, send_index, pg
        self.send_counts, self.recv_counts, self.codec, self.grad_codec = send_counts, recv_counts, codec, grad_codec
        self._pending = None

    def start(self, grad: torch.Tensor) -> None:
        out, work, payload = _all_to_all(
            grad.contiguous(), self.recv_counts, self.send_counts, self.pg, self.grad_codec, async_op=True
        )
        self._pending = (out, work, payload, grad.new_empty((0, *grad.shape[1:])))

    def finish(self, num_rows: int) -> torch.Tensor:
        out, work, _, like = self._pending
        self._pending = None
        began = time.perf_counter()
        with torch.profiler.record_function("dsgraph/comm/wait"):
            work.wait()
        self.pg.stats.add_time(time.perf_counter() - began)
        back = self.grad_codec.decode(out, like)
        return back.new_zeros((num_rows, *back.shape[1:])).index_add_(0, self.send_index, back)


class _SentRows(torch.autograd.Function):
    """An empty token that ties the received rows to the rows they were sent from: its backward
    is the gradient of ``x`` from the exchange (``_GradExchange.finish``)."""

    @staticmethod
    def forward(ctx, x, exchange: _GradExchange):
        ctx.exchange, ctx.num_rows = exchange, x.shape[0]
        return x.new_empty(0)

    @staticmethod
    def backward(ctx, _):
        return ctx.exchange.finish(ctx.num_rows), None


class _ReceivedRows(torch.autograd.Function):
    """The received rows restored from their payload; backward starts sending their gradients back."""

    @staticmethod
    def forward(ctx, token, received, exchange: _GradExchange):
        ctx.exchange = exchange
        return exchange.codec.decode(received, exchange.like)

    @staticmethod
    def backward(ctx, grad):
        ctx.exchange.start(grad)
        return grad.new_zeros(0), None, None


class PendingRows:
    """An exchange in flight: ``wait()`` returns the received rows [sum(recv_counts), ...]."""

    def __init__(self, finish, work, keep_alive, pg: GraphParallelGroup):
        self._finish, self._work, self._keep_alive, self._pg = finish, work, keep_alive, pg
        self._rows = None

    def wait(self) -> torch.Tensor:
        if self._rows is None:
            if self._work is not None:
                began = time.perf_counter()
                with torch.profiler.record_function("dsgraph/comm/wait"):
                    self._work.wait()
                self._pg.stats.add_time(time.perf_counter() - began)
            self._rows, self._work, self._keep_alive = self._finish(), None, None
        return self._rows


def start_exchange_rows(
    x,
    send_index,
    send_counts: list[int],
    recv_counts: list[int],
    pg: GraphParallelGroup,
    codec: Codec = PLAIN,
    grad_codec: Codec = PLAIN,
) -> PendingRows:
    """Sends x[send_index] (grouped by destination rank, sizes ``send_counts``), asynchronously; the
    ``PendingRows``' ``wait()`` gives the [sum(recv_counts), ...] rows received, grouped by source
    rank. Issue no other collective on ``pg`` between the start and the wait."""
    if pg.world_size == 1:
        rows = x.index_select(0, send_index)
        return PendingRows(lambda: rows, None, None, pg)
    sent = x.detach().index_select(0, send_index)
    received, work, payload = _all_to_all(sent, send_counts, recv_counts, pg, codec, async_op=True)
    exchange = _GradExchange(
        sent.new_empty((0, *sent.shape[1:])), send_index, send_counts, recv_counts, pg, codec, grad_codec
    )
    token = _SentRows.apply(x, exchange)
    return PendingRows(lambda: _ReceivedRows.apply(token, received, exchange), work, payload, pg)


def exchange_rows(
    x,
    send_index,
    send_counts: list[int],
    recv_counts: list[int],
    pg: GraphParallelGroup,
    codec: Codec = PLAIN,
    grad_codec: Codec = PLAIN,
) -> torch.Tensor:
    """``start_exchange_rows`` waited for at once."""
    return start_exchange_rows(x, send_index, send_counts, recv_counts, pg, codec, grad_codec).wait()


class _ReceivedSplit(torch.autograd.Function):
    """The result of an asynchronous change of split (``to_heads``: node -> head split, else head ->
    node split) as a function of its input; backward is the dual change, synchronously."""

    @staticmethod
    def forward(ctx, x, received, to_heads, pg, codec, grad_codec):
        ctx.to_heads, ctx.pg, ctx.grad_codec = to_heads, pg, grad_codec
        like = x[:1, : x.shape[1] // pg.world_size] if to_heads else x[:1]  # a row's shape and dtype
        rows = codec.decode(received, like)
        return rows if to_heads else _node_split(rows, pg)

    @staticmethod
    def backward(ctx, grad):
        dual = _heads_to_nodes if ctx.to_heads else _nodes_to_heads
        return dual(grad.contiguous(), ctx.pg, ctx.grad_codec), None, None, None, None, None


def start_nodes_to_heads(x_nHD, pg: GraphParallelGroup, codec: Codec = PLAIN, grad_codec: Codec = PLAIN) -> PendingRows:
    """``nodes_to_heads`` started asynchronously (``wait()`` gives [N, H/P, D])."""
    if pg.world_size == 1:
        return PendingRows(lambda: x_nHD, None, None, pg)
    send, splits, recv = _head_split_send(x_nHD.detach(), pg)
    received, work, payload = _all_to_all(send, splits, recv, pg, codec, async_op=True)
    return PendingRows(lambda: _ReceivedSplit.apply(x_nHD, received, True, pg, codec, grad_codec), work, payload, pg)


def start_heads_to_nodes(y_NhD, pg: GraphParallelGroup, codec: Codec = PLAIN, grad_codec: Codec = PLAIN) -> PendingRows:
    """``heads_to_nodes`` started asynchronously (``wait()`` gives [n, H, D])."""
    if pg.world_size == 1:
        return PendingRows(lambda: y_NhD, None, None, pg)
    n = pg.counts[pg.rank]
    received, work, payload = _all_to_all(
        y_NhD.detach().contiguous(), pg.counts, [n] * pg.world_size, pg, codec, async_op=True
    )
    return PendingRows(lambda: _ReceivedSplit.apply(y_NhD, received, False, pg, codec, grad_codec), work, payload, pg)
