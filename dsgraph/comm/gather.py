"""All-gather of row blocks and its dual, the reduce-scatter of their gradients (an autograd pair).

Rank r holds rows [start_r, end_r) of the group's row split. ``gather_rows_padded`` delivers every
rank's rows in the layout the collective produces, [P * width, ...] with rank r's block at
r * width (width = the largest count), so nothing is copied to close the gaps; ``padded_index``
maps global row ids into it. ``gather_rows`` closes the gaps for callers that want [N, ...].
``start_gather_rows_padded`` starts the same gather asynchronously, so work can run while it travels.
``gather_constant_rows`` gathers rows without a gradient in uneven counts (per-edge constants).
``regathered_in_backward`` lets an op that saves gathered rows for backward keep only this rank's
rows instead, and gathers them again when backward needs them.

With a codec (``compress.py``) the rows travel compressed and are restored on arrival (the rank's
own rows stay exact); the gradients travel in the compute dtype through a reduce-scatter, or, with
a gradient codec, compressed through an all-to-all and summed on arrival (compressed values of
different scales cannot be summed on the wire).
"""

from __future__ import annotations

import time
import warnings

import torch

from dsgraph.comm.compress import Codec
from dsgraph.comm.group import GraphParallelGroup
from dsgraph.comm.util import dist, nbytes

# torch 2.13 prefers all_gather_single / reduce_scatter_single, which deepspeed.comm does not wrap yet.
warnings.filterwarnings(
    "ignore", message=r".*`torch.distributed.(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated"
)

PLAIN = Codec()


def _launch_gather(x: torch.Tensor, pg: GraphParallelGroup, codec: Codec, async_op: bool, counts=None):
    """Encodes and pads this rank's rows and all-gathers them: (payload rows [P * width, ...], the
    work handle when ``async_op``, the send buffer); ``counts``: the ranks' row counts when they are
    not ``pg.counts`` (width = their largest)."""
    width = max(pg.counts if counts is None else counts)
    payload = codec.encode(x.detach()).contiguous()
    send = payload
    if payload.shape[0] != width:
        send = payload.new_zeros((width, *payload.shape[1:]))
        send[: payload.shape[0]] = payload
    out = send.new_empty((width * pg.world_size, *send.shape[1:]))
    sent = nbytes(send) * (pg.world_size - 1)
    if not async_op:
        with pg.stats.record(x, sent, "all_gather"):
            dist().all_gather_into_tensor(out, send, group=pg.group)
        return out, None, send
    began = time.perf_counter()  # no device synchronisation: the gather must not wait for itself
    with torch.profiler.record_function("dsgraph/comm/all_gather"):
        work = dist().all_gather_into_tensor(out, send, group=pg.group, async_op=True)
    pg.stats.add_time(time.perf_counter() - began)
    pg.stats.count(sent)
    return out, work, send


def _restore(x: torch.Tensor, received: torch.Tensor, pg: GraphParallelGroup, codec: Codec) -> torch.Tensor:
    """The gathered payload as rows in x's dtype; this rank's own rows stay exact."""
    if received.dtype == x.dtype and codec.name in (PLAIN.name, "bf16"):
        return received
    rows = codec.decode(received, x)
    width = max(pg.counts)
    rows[pg.rank * width : pg.rank * width + x.shape[0]] = x.detach()
    return rows


def _reduce_scatter_padded(grad: torch.Tensor, pg: GraphParallelGroup, codec: Codec) -> torch.Tensor:
    """[P * width, ...] (the padded layout) on each rank -> the sum over ranks of this rank's rows [n, ...]."""
    width, p, n = max(pg.counts), pg.world_size, pg.counts[pg.rank]
    if codec.name == PLAIN.name:
        out = grad.new_empty((width, *grad.shape[1:]))
        with pg.stats.record(grad, nbytes(out) * (p - 1), "reduce_scatter"):
            dist().reduce_scatter_tensor(out, grad, group=pg.group)
        return out[:n]
    payload = codec.encode(grad)  # block r of the padded layout goes to rank r
    received = payload.new_empty(payload.shape)
    with pg.stats.record(grad, nbytes(payload) // p * (p - 1), "reduce_scatter_compressed"):
        dist().all_to_all_single(received, payload, group=pg.group)
    parts = codec.decode(received, grad).view(p, width, *grad.shape[1:])
    parts[pg.rank] = grad[pg.rank * width : (pg.rank + 1) * width]  # this rank's own share, exact
    return parts.sum(0)[:n]


class _GatheredRows(torch.autograd.Function):
    """The gathered rows as a function of this rank's: forward restores the received payload;
    backward reduce-scatters the gradient in the padded layout."""

    @staticmethod
    def forward(ctx, x, received, pg, codec, grad_codec):
        ctx.pg, ctx.grad_codec = pg, grad_codec
        return _restore(x, received, pg, codec)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_padded(grad.contiguous(), ctx.pg, ctx.grad_codec), None, None, None, None


def gather_rows_padded(
    x: torch.Tensor, pg: GraphParallelGroup, codec: Codec = PLAIN, grad_codec: Codec = PLAIN
) -> torch.Tensor:
    """All-gather into the padded layout [P * width, ...] (rank r's rows start at r * width; see
    ``padded_index``). Backward: reduce-scatter of the gradient in that layout. One rank: x itself."""
    if pg.world_size == 1:
        return x
    received, _, _ = _launch_gather(x, pg, codec, async_op=False)
    return _GatheredRows.apply(x, received, pg, codec, grad_codec)


def start_gather_rows_padded(x: torch.Tensor, pg: GraphParallelGroup, codec: Codec = PLAIN, grad_codec: Codec = PLAIN):
    """``gather_rows_padded`` started asynchronously: returns a ``PendingRows`` whose ``wait()`` gives
    the [P * width, ...] rows (in autograd: its backward reduce-scatters, synchronously)."""
    from dsgraph.comm.alltoall import PendingRows

    if pg.world_size == 1:
        return PendingRows(lambda: x, None, None, pg)
    received, work, send = _launch_gather(x, pg, codec, async_op=True)
    return PendingRows(lambda: _GatheredRows.apply(x, received, pg, codec, grad_codec), work, send, pg)


class _Regather:
    """What autograd keeps of a gathered tensor under ``regathered_in_backward``: the rows it was
    gathered from, and how."""

    def __init__(self, x: torch.Tensor, pg: GraphParallelGroup, codec: Codec):
        self.x, self.pg, self.codec = x.detach(), pg, codec

    def gather(self) -> torch.Tensor:
        with torch.no_grad():
            received, _, _ = _launch_gather(self.x, self.pg, self.codec, async_op=False)
            return _restore(self.x, received, self.pg, self.codec)


def _key(t: torch.Tensor) -> tuple:
    return t.data_ptr(), t.dtype, tuple(t.shape), t.stride()


def regathered_in_backward(pairs, pg: GraphParallelGroup, codec: Codec = PLAIN):
    """A ``saved_tensors_hooks`` context for ops on gathered rows: ``pairs`` are (gathered tensor
    [P * width, ...] from ``gather_rows_padded``, the rank's rows it was gathered from). An op run
    inside that saves one of the gathered tensors for backward keeps the rank's rows instead, and
    backward all-gathers them again (the same rows, codec and layout: the same values). The
    [P * width, ...] replica then exists only while its op runs forward and backward, at the price
    of one more all-gather of the same bytes in backward. Every rank must run the same ops (the
    re-gather is a collective, in backward's order). Other saved tensors are kept as they are."""
    rows = {_key(gathered): x for gathered, x in pairs if gathered is not x}

    def pack(t: torch.Tensor):
        x = rows.get(_key(t))
        return t if x is None else _Regather(x, pg, codec)

    def unpack(saved):
        return saved.gather() if isinstance(saved, _Regather) else saved

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def padded_index(ids: torch.Tensor, pg: GraphParallelGroup) -> torch.Tensor:
    """Global row ids -> their rows in ``gather_rows_padded``'s layout (int64, ids' device)."""
    if pg.world_size == 1:
        return ids.long()
    starts = torch.tensor(pg.starts, dtype=torch.int64, device=ids.device)
    owner = torch.searchsorted(starts[1:], ids.long(), right=True)
    return ids.long() - starts[owner] + owner * max(pg.counts)


def gather_constant_rows(x: torch.Tensor, counts: list[int], pg: GraphParallelGroup) -> torch.Tensor:
    """All-gather of rows that take no gradient, uneven: [counts[rank], ...] on each rank -> all
    [sum(counts), ...] in rank order (per-edge constants such as edge features, ``counts`` the
    ranks' edge counts). One collective of max(counts) rows per rank. One rank: ``x`` itself."""
    if pg.world_size == 1:
        return x
    if x.shape[0] != counts[pg.rank]:
        raise ValueError(
            f"gather_constant_rows: rank {pg.rank} holds {x.shape[0]} rows, its count says {counts[pg.rank]}"
        )
    return _close_gaps(_launch_gather(x, pg, PLAIN, False, counts)[0], counts)


def _close_gaps(padded: torch.Tensor, counts) -> torch.Tensor:
    """[P * width, ...] in the gather's padded layout -> the ranks' ``counts`` rows back to back."""
    blocks = padded.view(len(counts), max(counts), *padded.shape[1:])
    return torch.cat([blocks[r, :c] for r, c in enumerate(counts)])


def gather_rows(x: torch.Tensor, pg: GraphParallelGroup) -> torch.Tensor:
    """All-gather: local rows [n, ...] (n = pg.counts[rank]) -> all rows [N, ...] in rank order.
    Backward: reduce-scatter of the full gradient back to [n, ...]."""
    if pg.world_size == 1:
        return x
    return _close_gaps(gather_rows_padded(x, pg), pg.counts)
