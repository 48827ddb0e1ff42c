"""GP-AG ring: GP-AG without the N x d replica. K/V blocks travel around the ring of ranks while
each rank computes attention over the block it holds; partial results merge by their log-sum-exp
(``dsgraph.ops.blocks``).

Rank r's in-edges are grouped by the rank that owns their source (one CSR per source rank, with
the source's local ids). In step t = 0..P-1 rank r holds block s = (r - t) mod P: it sends that
block on to rank r + 1 while it attends over it, and receives block s - 1 from rank r - 1. The
forward keeps a running (y, lse) per (row, head) and merges each block's partial result:
``lse = logaddexp(lse_a, lse_b)``, ``y = e^(lse_a - lse) y_a + e^(lse_b - lse) y_b``; it keeps
what each block's backward reads (the probabilities on CPU, the log-sum-exp on CUDA).

Backward (symmetric): the K/V blocks go around again; for the block it holds, a rank computes its
rows' share of dq and its contribution to the block's dK, dV from the final y and lse and the
block's saved forward; each block's dK/dV accumulator travels with the ring (in the activation
dtype, summed in fp32) and is back with its owner after P steps. Per rank and layer this keeps its
own K, V and two blocks in flight instead of all N rows, and sends (3P - 2) / (2P - 2) times
GP-AG's bytes (2x at 2 ranks, 1.67x at 4, towards 1.5x).

A score bias [e, H] is the rank's own (its rows' in-edges); each block's edges take their rows of
it (``RingPlan.edge_order``), and each block's backward returns its rows of the bias's gradient.
Edge values u [e, C] are sliced the same way; each block's z merges like y, and each block's
backward adds its edges' share of the gradient of the whole z (``dsgraph.ops.blocks``).
Constant scores (q = k = None, ``dsgraph/ops/mean.py``): V blocks travel alone, and dV accumulators.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from dsgraph.comm import GraphParallelGroup, start_ring_shift
from dsgraph.ops import Partial, attention_backward, attention_forward, merge
from dsgraph.parallel.spec import CostTerms, GraphAttention, Needs, Strategy

PLAN = "ring_plan"  # the key of the plan in RankGraph.derived
ROWPTR_BYTES, INDEX_BYTES = 8, 4


@dataclass(frozen=True)
class RingPlan:
    """This rank's in-edges grouped by the rank that owns the source."""

    rowptr: torch.Tensor
    """int64 [P, n+1]: row pointers of this rank's n rows over the sources of each rank."""
    col: torch.Tensor
    """int32 [e]: sources as local ids of their owner, grouped by owner (rows ascending in each)."""
    offsets: tuple[int, ...]
    """[P+1]: the edges of owner s are col[offsets[s]:offsets[s+1]]."""
    counts: tuple[int, ...]
    """[P]: rows per rank (block s has counts[s] K/V rows)."""
    edge_order: torch.Tensor
    """int64 [e]: the block (CSR) edge of each edge of ``col``, so block s's edges are
    edge_order[offsets[s]:offsets[s+1]] (for per-edge data such as a score bias)."""

    @classmethod
    def build(cls, rowptr: np.ndarray, col: np.ndarray, starts: list[int]) -> RingPlan:
        """``rowptr`` [n+1] and ``col`` [e] (global source ids) are this rank's CSR block."""
        n, world = rowptr.size - 1, len(starts) - 1
        row = np.repeat(np.arange(n, dtype=np.int64), np.diff(rowptr))
        owner = np.searchsorted(np.asarray(starts[1:], dtype=np.int64), col, side="right")
        order = np.argsort(owner * max(n, 1) + row, kind="stable")  # by owner, then row, edge order kept
        owner_sorted, row_sorted = owner[order], row[order]
        ptr = np.zeros((world, n + 1), dtype=np.int64)
        for s in range(world):
            np.cumsum(np.bincount(row_sorted[owner_sorted == s], minlength=n), out=ptr[s, 1:])
        offsets = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=world))])
        local = col[order].astype(np.int64) - np.asarray(starts, dtype=np.int64)[owner_sorted]
        return cls(
            torch.from_numpy(ptr),
            torch.from_numpy(local.astype(np.int32)),
            tuple(int(o) for o in offsets),
            tuple(b - a for a, b in zip(starts[:-1], starts[1:])),
            torch.from_numpy(order.astype(np.int64)),
        )

    def to(self, device: torch.device) -> RingPlan:
        return RingPlan(
            self.rowptr.to(device), self.col.to(device), self.offsets, self.counts, self.edge_order.to(device)
        )

    def block_bias(self, bias_eH: torch.Tensor | None) -> list[torch.Tensor | None]:
        """Each block's rows of a per-edge tensor [e, ...] (block CSR order: a score bias, edge
        values), in its own edge order."""
        if bias_eH is None:
            return [None] * len(self.counts)
        ordered = bias_eH.index_select(0, self.edge_order)
        return [ordered[self.offsets[s] : self.offsets[s + 1]] for s in range(len(self.counts))]

    def scatter_bias(self, blocks: list[torch.Tensor | None], bias_eH: torch.Tensor | None) -> torch.Tensor | None:
        """The blocks' rows of a bias gradient put back in block CSR order [e, H] (None without a bias)."""
        if bias_eH is None:
            return None
        out = torch.empty_like(bias_eH)
        out[self.edge_order] = torch.cat([b.to(bias_eH.dtype) for b in blocks])
        return out

    def blocks(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(rowptr, col) of each source rank's block; make them once and keep them, so that what the
        backends cache per graph (the transpose, CUDA plans) is built once per block."""
        return [(self.rowptr[s], self.col[self.offsets[s] : self.offsets[s + 1]]) for s in range(len(self.counts))]


class _Ring(torch.autograd.Function):
    """K/V blocks travel as rows [2 n_s, H, D] (K rows, then V rows; V alone, [n_s, H, D], for
    constant scores, q = k = None), encoded once by their owner (``comm_dtype``) and passed on as
    received; dK/dV accumulators travel in ``comm_grad_dtype``. Returns y, and z when given edge
    values (they take no gradient)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, values, att: RingAttention):
        pg, p, rank = att.pg, att.pg.world_size, att.pg.rank
        biases, block_values = att.plan.block_bias(None if bias is None else bias.detach()), att.plan.block_bias(values)
        kv = _stacked(k, v)
        payload = att.codec.encode(kv.detach().view(-1, *v.shape[1:])) if p > 1 else None  # [2 n, H, D]
        parts, whole = [None] * p, None
        for t in range(p):
            s = (rank - t) % p
            pending = start_ring_shift(payload, att.rows_shape(s - 1, payload, len(kv)), pg) if t < p - 1 else None
            k_s, v_s = _unstacked(
                kv.detach() if t == 0 else att.codec.decode(payload, v).view(len(kv), -1, *v.shape[1:])
            )
            parts[s] = attention_forward(
                *att.blocks[s], q, k_s, v_s, bias=biases[s], edge_values=block_values[s], backend=att.backend
            )
            whole = (
                (parts[s].y, parts[s].lse, *(() if values is None else (parts[s].z,)))
                if whole is None
                else merge(whole, parts[s])
            )
            if pending is not None:
                payload = pending.wait()
        optional = (() if bias is None else (bias,)) + (() if values is None else (values,))
        ctx.constant, ctx.v_like = k is None, (v.shape, v.dtype, v.device)  # constant scores' backward reads no V
        ctx.save_for_backward(
            *(() if k is None else (q, k, v)),
            *whole,
            *optional,
            *(t for part in parts for t in (part.lse, *part.saved)),
        )
        ctx.att, ctx.saved_per_part = (
            att,
            1 + len(parts[0].saved),
        )  # through save_for_backward: checkpointing's hooks see them
        ctx.has_bias, ctx.has_values = bias is not None, values is not None
        if values is None:
            return whole[0].to(v.dtype)
        return whole[0].to(v.dtype), whole[2].to(v.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy, dz=None):
        flat = [t.detach() for t in ctx.saved_tensors]
        q, k, v = (None, None, _shaped_like(*ctx.v_like)) if ctx.constant else (flat.pop(0) for _ in range(3))
        whole = tuple(flat.pop(0) for _ in range(3 if ctx.has_values else 2))  # (y, lse[, z])
        bias = flat.pop(0) if ctx.has_bias else None
        values = flat.pop(0) if ctx.has_values else None
        att, n = ctx.att, ctx.saved_per_part
        z = whole[2] if values is not None else None
        parts = [
            Partial(whole[0], flat[i], tuple(flat[i + 1 : i + n]), z) for i in range(0, len(flat), n)
        ]  # the block's y, z are not read
        pg, p, rank = att.pg, att.pg.world_size, att.pg.rank
        biases, dbias, block_values = att.plan.block_bias(bias), [None] * p, att.plan.block_bias(values)
        with_values = dict(dz=dz) if values is not None else {}
        if p == 1:  # one block: the whole attention, nothing travels
            needs = tuple(ctx.needs_input_grad[:4])
            block = attention_backward(
                *att.blocks[0],
                q,
                k,
                v,
                parts[0],
                dy,
                bias=biases[0],
                edge_values=block_values[0],
                backend=att.backend,
                needs=needs,
                **with_values,
            )
            return (
                *block[:3],
                att.plan.scatter_bias(list(block[3:]), bias) if ctx.needs_input_grad[3] else None,
                None,
                None,
            )
        kv = None if ctx.constant else torch.stack([k, v])
        payload = None if ctx.constant else att.codec.encode(kv.view(-1, *v.shape[1:]))  # as in forward: the same K/V
        dq = None if q is None else torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        arriving = None  # the accumulator of the next block, in flight from rank r - 1
        for t in range(p):
            s = (rank - t) % p
            if ctx.constant:  # nothing to decode: V's shape is all the mean's backward reads
                pending, (k_s, v_s) = None, (None, _shaped_like(att.rows_shape(s, v, 1), v.dtype, v.device))
            else:
                pending = start_ring_shift(payload, att.rows_shape(s - 1, payload), pg) if t < p - 1 else None
                k_s, v_s = _unstacked(kv if t == 0 else att.codec.decode(payload, v).view(2, -1, *v.shape[1:]))
            block = attention_backward(
                *att.blocks[s],
                q,
                k_s,
                v_s,
                parts[s],
                dy,
                bias=biases[s],
                edge_values=block_values[s],
                whole=whole,
                backend=att.backend,
                **with_values,
            )
            (dq_b, dk_b, dv_b), dbias[s] = block[:3], block[3] if bias is not None else None
            if dq is not None:
                dq += dq_b
            acc = torch.cat([dv_b] if k is None else [dk_b, dv_b]).float()  # [2 n_s, H, D]
            if arriving is not None:
                acc += att.grad_codec.decode(arriving.wait(), acc).float()
            send = att.grad_codec.encode(acc.to(v.dtype))
            arriving = start_ring_shift(send, att.rows_shape(s - 1, send, 1 if k is None else 2), pg)
            if pending is not None:
                payload = pending.wait()
        grads = (
            att.grad_codec.decode(arriving.wait(), v).float().view(1 if k is None else 2, -1, *v.shape[1:])
        )  # block r's dK, dV, back with their owner
        need = ctx.needs_input_grad
        return (
            dq.to(q.dtype) if need[0] else None,
            grads[0].to(k.dtype) if need[1] else None,
            grads[-1].to(v.dtype) if need[2] else None,
            att.plan.scatter_bias(dbias, bias) if need[3] else None,
            None,
            None,
        )


def _stacked(k, v) -> torch.Tensor:
    """[2, n, H, D]: K and V rows stacked; [1, n, H, D], V alone, for constant scores (k None)."""
    return v[None] if k is None else torch.stack([k, v])


def _shaped_like(shape, dtype, device) -> torch.Tensor:
    """A tensor of ``shape`` that holds no data (one zero, expanded): what constant scores' backward
    takes for V, whose values it never reads."""
    return torch.zeros((), dtype=dtype, device=device).expand(shape)


def _unstacked(kv: torch.Tensor) -> tuple:
    """(k, v) of ``_stacked`` rows, k None for V alone."""
    return (None, kv[0]) if kv.shape[0] == 1 else (kv[0], kv[1])


class RingAttention(GraphAttention):
    """Per rank: q, k, v [n, H, D] -> y [n, H, D]; ``plan`` was built by ``AllGatherRing.prepare``
    and moved to the device with the graph."""

    name = "ag_ring"

    def __init__(self, plan: RingPlan, pg: GraphParallelGroup, ctx, edges=None):
        self.plan, self.pg, self.backend, self.edges = plan, pg, ctx.backend, edges
        self.codec, self.grad_codec = ctx.parallel.codec, ctx.parallel.grad_codec
        self.blocks = plan.blocks()

    def rows_shape(self, s: int, like: torch.Tensor, stacked: int = 2) -> tuple[int, ...]:
        """The shape of source rank s's block of ``stacked`` x n_s rows (s taken mod P; 2: K and V,
        1: V alone), rows like ``like``'s."""
        return (stacked * self.plan.counts[s % len(self.plan.counts)], *like.shape[1:])

    def __call__(self, q_nHD, k_nHD, v_nHD, bias_eH=None, edge_values=None):
        return _Ring.apply(q_nHD, k_nHD, v_nHD, bias_eH, None if edge_values is None else edge_values.detach(), self)


def copied_values(rows: int, total_rows: int, hidden: int, heads: int, p: int) -> float:
    """Values a rank of ``rows`` rows writes per layer besides its kernels and collectives
    (``CostTerms.copied_values``), ``total_rows`` = N: K and V stacked for the ring, forward and
    backward (4 rows); P - 1 merges of a block's partial result (4 rows each: two scalings, the sum,
    the division); in backward, each block's share of the output gradient rescaled (P rows), dq
    zeroed and summed over the blocks (1 + P rows), and each block's dK | dV accumulator
    concatenated (2 N in all) and summed into the arriving one (2 (N - rows)); per (row, head), the
    log-sum-exp terms of the merges and of each block's backward (17 P - 12). One rank: K and V
    stacked once."""
    if p == 1:
        return float(2 * rows * hidden)
    return float((4 * total_rows + (6 * p - 1) * rows) * hidden + (17 * p - 12) * rows * heads)


class AllGatherRing(Strategy):
    name = "ag_ring"
    summary = (
        "GP-AG with K/V blocks passed around a ring while attention runs; two K/V blocks per rank instead of N x d"
    )
    needs = Needs.ROWS
    edge_values = True

    def prepare(self, graph, pg, ctx):
        graph.derived[PLAN] = RingPlan.build(graph.block.rowptr.numpy(), graph.block.col.numpy(), pg.starts)

    def build(self, graph, pg, ctx):
        if PLAN not in graph.derived:
            raise ValueError(f"strategy {self.name}: the graph was not prepared (Strategy.prepare before RankGraph.to)")
        attention = RingAttention(graph.derived[PLAN], pg, ctx, graph.edges)
        attention.degrees = graph.block.rowptr.diff()
        return attention

    def cost(self, p, shape, model, dtype_bytes):
        split = shape.row_split(p)
        (n, e), n_all = split.largest(), shape.num_nodes
        d, b, c = model.hidden, dtype_bytes, model.edge_values
        row, grad_row = 2 * model.wire_bytes(d, b), 2 * model.wire_bytes(d, b, gradient=True)  # a node's K and V rows
        # a ring step costs 1/(P-1) of a ring all-gather: the K/V go round twice (forward, backward), dK/dV P steps
        messages = (("all_gather", n * row, 2), ("all_gather", n * grad_row, p / (p - 1))) if p > 1 else ()
        kv_sent = (n_all - min(split.part_nodes)) * row if p > 1 else 0.0  # every block but the next rank's
        return CostTerms(
            forward_messages=(("all_gather", n * row, 1),) if p > 1 else (),
            forward_bytes=kv_sent,
            edge_heads=e * model.heads,
            rows=n,
            attention_calls=p,  # one kernel call per block: the rank's rows over one block's K/V
            attention_sources=n,
            messages=messages,
            bytes_sent=2 * kv_sent + (n_all * grad_row if p > 1 else 0.0),
            graph_bytes=p * (n + 1) * ROWPTR_BYTES + (n_all + p) * ROWPTR_BYTES + e * (2 * INDEX_BYTES + ROWPTR_BYTES),
            # own K, V; y and lse in fp32; with edge values (C = model.edge_values) the whole z in fp32 and u
            activation_bytes=n * row
            + n * d * 4
            + n * model.heads * 4
            + model.bias_bytes(e, b)
            + model.edge_value_bytes(n, e, b),
            transient_bytes=4 * n * row
            + n * d * 4
            + e * c * b,  # two K/V blocks and two dK/dV blocks in flight, dq; u by block
            copied_values=copied_values(n, n_all, d, model.heads, p),
            overlapped=True,
        )
