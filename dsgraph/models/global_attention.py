"""Linear global attention: every node attends to every node of the graph, in O(N) time and with
one small all-reduce per layer when the graph is split over ranks.

The kernel is the elu + 1 feature map of Katharopoulos et al., "Transformers are RNNs: Fast
Autoregressive Transformers with Linear Attention" (ICML 2020): with phi(x) = elu(x) + 1 > 0, per head h

    y_ih = phi(q_ih)^T S_h / (phi(q_ih)^T z_h + eps),   S_h = sum_j phi(k_jh) v_jh^T [D, D],   z_h = sum_j phi(k_jh) [D]

where j runs over all nodes. Why this one: everything a node needs from the others is two sums over
nodes, so P ranks each sum their own rows and one all-reduce of [H, D, D] + [H, D] values makes the
whole graph's sums (equal to the one-rank run up to summation order); the feature map is
deterministic (Performer's FAVOR+ needs random features that every rank must draw alike and redraw,
and its positive random features grow noisy as the norms of q and k grow); it keeps the heads and
the Q/K/V projections of the local attention (SGFormer's simple global attention is single-head and
also needs the Frobenius norms of Q and K over all nodes); the denominator is positive, so no row
divides by zero.

The layer adds it beside the local attention over in-edges as GraphGPS does (Rampasek et al.,
"Recipe for a General, Powerful, Scalable Graph Transformer", NeurIPS 2022): both branches read
the block's input, their outputs are summed with the residual, then the FFN (``blocks.py``).

Which nodes are "all nodes" is the attention's ``global_scope()`` (``GlobalNodes``): full-graph
training, evaluation and prediction: every node of the graph, over all ranks; sampled mode: the
global mini-batch's seed nodes (a uniform sample of the training nodes, as SGFormer's mini-batches
are), over all ranks; isolated mode: the rank's own subgraph (its chunks and halo), no collective.
A plain callable as attention (one process, a graph held whole): all of its rows.

Per-rank shape contract: q, k, v [n, H, D] (this rank's rows) -> y [n, H, D] in q's dtype; the sums
are formed and all-reduced in fp32. Backward: the gradient of the sums is all-reduced (the autograd
pair in ``dsgraph/comm/allreduce.py``), then flows to this rank's q, k, v. The two halves (the sums
over k and v; the read-out of q) are autograd functions that work over row chunks of
``CHUNK_VALUES`` values and keep only q, k, v and the sums for backward, where they recompute the
fp32 feature maps, numerator and denominator chunk by chunk: the fp32 work never spans all rows
(it was six fp32 rows of d per node, the largest buffer of a block's backward).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dsgraph.comm.allreduce import GlobalNodes
from dsgraph.comm.group import GraphParallelGroup
from dsgraph.models.dropout import NodeDropout

EPS = 1e-6  # in the denominator, as the reference implementation (fast-transformers) has it
GLOBAL_OUTPUT_SITE, GLOBAL_VALUE_SITE = 4, 5  # NodeDropout sites (blocks.py lists the others)
CHUNK_VALUES = 1 << 20  # values per fp32 temporary on a CPU (4 MB): the fp32 work never spans all rows
FULL_PRODUCT_WIDTH = 128  # _add_outer_sum's one-GEMM path up to this many columns


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1, in fp32."""
    return F.elu(x.float()) + 1.0


def scope_of(attention) -> GlobalNodes:
    """The nodes global attention spans for ``attention``: its ``global_scope()``; a plain callable
    (one process holding the whole graph): all of its rows."""
    scope = getattr(attention, "global_scope", None)
    return scope() if scope is not None else GlobalNodes(GraphParallelGroup())


def linear_attention(q_nHD: torch.Tensor, k_nHD: torch.Tensor, v_nHD: torch.Tensor, scope: GlobalNodes) -> torch.Tensor:
    """y [n, H, D] (q's dtype): each row's elu + 1 linear attention over the nodes of ``scope``."""
    sums = scope.sum(_KeyValueSums.apply(scope.select(k_nHD), scope.select(v_nHD)))  # one all-reduce
    return _Readout.apply(q_nHD, sums, v_nHD.dtype)


def _row_chunks(x_nHD: torch.Tensor):
    """Slices of ``x``'s rows holding about ``CHUNK_VALUES`` values each (one chunk on a GPU)."""
    n, width = x_nHD.shape[0], x_nHD.shape[1] * x_nHD.shape[2]
    rows = n if x_nHD.device.type == "cuda" else max(1, CHUNK_VALUES // max(width, 1))
    return [slice(start, min(start + rows, n)) for start in range(0, n, rows)]


def _feature_map_grad(x: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """d phi / dx: 1 where x > 0, exp(x) = phi(x) elsewhere."""
    return torch.where(x > 0, torch.ones_like(phi), phi)


def _add_outer_sum(out_HDE: torch.Tensor, a_mHD: torch.Tensor, b_mHE: torch.Tensor) -> None:
    """out_h += sum_m a_mh b_mh^T per head. Narrow heads (H x width <= ``FULL_PRODUCT_WIDTH``) take
    one GEMM over all heads at once and keep its diagonal blocks: H times the multiply-adds, yet 5x
    faster on a CPU than a batched product of H thin matrices (measured at 131K rows, H = D = 8)."""
    m, heads, d = a_mHD.shape
    e = b_mHE.shape[2]
    if heads * max(d, e) > FULL_PRODUCT_WIDTH:
        out_HDE += torch.einsum("mhd,mhe->hde", a_mHD, b_mHE)
        return
    full = (a_mHD.reshape(m, heads * d).T @ b_mHE.reshape(m, heads * e)).view(heads, d, heads, e)
    index = torch.arange(heads, device=full.device)
    out_HDE += full[index, :, index, :]


def _split(sums: torch.Tensor, heads: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The all-reduced vector -> S [H, D, D], z [H, D]."""
    return sums[: heads * dim * dim].view(heads, dim, dim), sums[heads * dim * dim :].view(heads, dim)


class _KeyValueSums(torch.autograd.Function):
    """k, v [m, H, D] -> [S, z] flattened, fp32, formed over row chunks (no fp32 copy of k or v at
    full size); backward recomputes phi(k) per chunk: dk = (dS v + dz) phi'(k), dv = dS^T phi(k)."""

    @staticmethod
    def forward(ctx, k_mHD, v_mHD):
        heads, dim = k_mHD.shape[1:]
        s_HDD = k_mHD.new_zeros((heads, dim, dim), dtype=torch.float32)
        z_HD = k_mHD.new_zeros((heads, dim), dtype=torch.float32)
        for rows in _row_chunks(k_mHD):
            phi_k = feature_map(k_mHD[rows])
            _add_outer_sum(s_HDD, phi_k, v_mHD[rows].float())
            z_HD += phi_k.sum(0)
        ctx.save_for_backward(k_mHD, v_mHD)
        return torch.cat([s_HDD.reshape(-1), z_HD.reshape(-1)])

    @staticmethod
    def backward(ctx, dsums):
        k_mHD, v_mHD = ctx.saved_tensors
        ds_HDD, dz_HD = _split(dsums, *k_mHD.shape[1:])
        dk, dv = torch.empty_like(k_mHD), torch.empty_like(v_mHD)
        for rows in _row_chunks(k_mHD):
            k = k_mHD[rows].float()
            phi_k = F.elu(k) + 1.0
            dphi = torch.einsum("hde,mhe->mhd", ds_HDD, v_mHD[rows].float()) + dz_HD
            dk[rows] = dphi * _feature_map_grad(k, phi_k)
            dv[rows] = torch.einsum("mhd,hde->mhe", phi_k, ds_HDD)
        return dk, dv


class _Readout(torch.autograd.Function):
    """q [n, H, D] and the all-reduced [S, z] -> y = phi(q) S / (phi(q) . z + eps) in ``dtype``, per
    row chunk; backward recomputes phi(q), the numerator and the denominator per chunk."""

    @staticmethod
    def forward(ctx, q_nHD, sums, dtype):
        s_HDD, z_HD = _split(sums, *q_nHD.shape[1:])
        y = torch.empty(q_nHD.shape, dtype=dtype, device=q_nHD.device)
        for rows in _row_chunks(q_nHD):
            phi_q = feature_map(q_nHD[rows])
            numerator = torch.einsum("nhd,hde->nhe", phi_q, s_HDD)
            y[rows] = numerator / (torch.einsum("nhd,hd->nh", phi_q, z_HD) + EPS)[..., None]
        ctx.save_for_backward(q_nHD, sums)
        return y

    @staticmethod
    def backward(ctx, dy_nHD):
        q_nHD, sums = ctx.saved_tensors
        heads, dim = q_nHD.shape[1:]
        s_HDD, z_HD = _split(sums, heads, dim)
        ds_HDD, dz_HD = torch.zeros_like(s_HDD), torch.zeros_like(z_HD)
        dq = torch.empty_like(q_nHD)
        for rows in _row_chunks(q_nHD):
            q = q_nHD[rows].float()
            phi_q = F.elu(q) + 1.0
            numerator = torch.einsum("nhd,hde->nhe", phi_q, s_HDD)
            denominator = torch.einsum("nhd,hd->nh", phi_q, z_HD) + EPS
            dnumerator = dy_nHD[rows].float() / denominator[..., None]
            ddenominator = -(dnumerator * numerator).sum(-1) / denominator
            dphi = torch.einsum("nhe,hde->nhd", dnumerator, s_HDD) + ddenominator[..., None] * z_HD
            dq[rows] = dphi * _feature_map_grad(q, phi_q)
            _add_outer_sum(ds_HDD, phi_q, dnumerator)
            dz_HD += torch.einsum("nh,nhd->hd", ddenominator, phi_q)
        return dq, torch.cat([ds_HDD.reshape(-1), dz_HD.reshape(-1)]), None


def sum_values(heads: int, head_dim: int) -> int:
    """fp32 values the all-reduce of one layer carries: S [H, D, D] and z [H, D]."""
    return heads * head_dim * (head_dim + 1)


class GlobalAttention(nn.Module):
    """The global branch of a block: h [n, in_dim] -> dropout(W_g y) [n, hidden], y the linear
    attention of (h W_q, h W_k, dropout(h W_v)) over the attention's ``global_scope()``, with
    projections of its own (GraphGPS keeps the local and the global module apart). Dropout sites 4
    (its output, rate ``dropout``) and 5 (each node's value vector per head, rate
    ``attention_dropout``), keyed like every NodeDropout (rank-independent)."""

    def __init__(self, in_dim: int, hidden: int, heads: int, dropout: float, attention_dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(in_dim, 3 * hidden)  # views of one product: linear_attention copies them to fp32 anyway
        self.out = nn.Linear(hidden, hidden)
        self.value_dropout = NodeDropout(attention_dropout, site=GLOBAL_VALUE_SITE)
        self.dropout = NodeDropout(dropout, site=GLOBAL_OUTPUT_SITE)

    def forward(self, x_ni, attention, node_ids, seed: int, step: int, layer: int) -> torch.Tensor:
        q_nHD, k_nHD, v_nHD = self.qkv(x_ni).view(x_ni.shape[0], 3, self.heads, -1).unbind(1)
        v_nHD = self.value_dropout(v_nHD, node_ids, seed, step, layer)
        y_nd = linear_attention(q_nHD, k_nHD, v_nHD, scope_of(attention)).flatten(1)
        return self.dropout(self.out(y_nd), node_ids, seed, step, layer)
