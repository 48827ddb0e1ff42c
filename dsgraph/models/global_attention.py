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
pair in ``dsgraph/comm/allreduce.py``), then flows to this rank's q, k, v. In training the branch
keeps q, k and v alone for backward (``torch.utils.checkpoint``) and recomputes the fp32 feature maps,
sums and numerator there (about six fp32 rows of d per node, a third of a block's kept bytes in bf16),
all-reducing the sums once more (H x D x (D + 1) fp32 values: a few KB); the result is the same.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from dsgraph.comm.allreduce import GlobalNodes
from dsgraph.comm.group import GraphParallelGroup
from dsgraph.models.dropout import NodeDropout

EPS = 1e-6  # in the denominator, as the reference implementation (fast-transformers) has it
GLOBAL_OUTPUT_SITE, GLOBAL_VALUE_SITE = 4, 5  # NodeDropout sites (blocks.py lists the others)


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
    n, heads, dim = q_nHD.shape
    k_mHD, v_mHD = feature_map(scope.select(k_nHD)), scope.select(v_nHD).float()
    kv_HDD = torch.einsum("mhd,mhe->hde", k_mHD, v_mHD)
    z_HD = k_mHD.sum(0)
    sums = scope.sum(torch.cat([kv_HDD.reshape(-1), z_HD.reshape(-1)]))  # one all-reduce: [H*D*D + H*D] fp32
    kv_HDD, z_HD = sums[: heads * dim * dim].view(heads, dim, dim), sums[heads * dim * dim :].view(heads, dim)
    q_nHD = feature_map(q_nHD)
    numerator_nHD = torch.einsum("nhd,hde->nhe", q_nHD, kv_HDD)
    denominator_nH = torch.einsum("nhd,hd->nh", q_nHD, z_HD) + EPS
    return (numerator_nHD / denominator_nH[..., None]).to(v_nHD.dtype)


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
        scope = scope_of(attention)
        if torch.is_grad_enabled():  # keep q, k, v alone: backward recomputes the fp32 terms (module docstring)
            y_nHD = checkpoint(linear_attention, q_nHD, k_nHD, v_nHD, scope, use_reentrant=False)
        else:
            y_nHD = linear_attention(q_nHD, k_nHD, v_nHD, scope)
        y_nd = y_nHD.flatten(1)
        return self.dropout(self.out(y_nd), node_ids, seed, step, layer)
