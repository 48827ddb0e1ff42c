"""GCN and GraphSAGE layers (``model.block`` 'gcn', 'sage') on the graph-parallel attention path.

Their aggregation is the attention of the rank's rows with constant scores: ``attention(None, None,
v)`` (q = k = None) is the mean of the in-neighbours' v (a softmax of equal scores is 1 / in-degree),
through whatever strategy, mode, backend, dtype and checkpointing the run uses. The op computes no
scores and no softmax for it (``dsgraph/ops/mean.py``: one gather-sum pass forward, one over the
transpose backward, dv only), and the strategies move V alone.

- sage (Hamilton et al. 2017, mean aggregator): mean_j(h_j W_n) + h_i W_r + b; the node is always
  apart from its neighbours (the run adds no self loops for it).
- gcn (Kipf and Welling 2017): sum_j d_i^-1/2 d_j^-1/2 h_j W + b over the in-edges (the self loop
  the run adds included, unless ``model.ego`` is 'sep', which adds h_i W_e instead), d the in-degree
  in the graph the layer attends over. Each rank scales its own rows' values by d_j^-1/2 before
  they travel and the mean of row i by d_i^1/2 = d_i * d_i^-1/2 after. In sampled mode that graph is
  the rank's sampled subgraph (as PyG's GCNConv on a NeighborLoader batch): a node that is only a
  source there has no in-edges (d = 1), so gcn's sampled steps depend on how the seeds split over
  the ranks; 'sage' needs no degrees and takes the same steps on any rank count.

A hidden block is the attention block's frame: h -> ELU(residual(h) + dropout(aggregation)), with
``norm`` 'pre' or 'post' and the optional global branch; the output block (head 'attention') is the
aggregation with class logits as values, as GCN's last layer is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dsgraph.models.blocks import Attention, Residual, ego_projection, global_branch, padded_head_dim, with_ego
from dsgraph.models.dropout import NodeDropout
from dsgraph.models.norms import make_norm


def row_degrees(attention) -> torch.Tensor:
    """int64 [n]: the in-degree of the rank's rows in the graph the attention runs over."""
    degrees = getattr(attention, "degrees", None)
    if degrees is None:
        raise ValueError(
            "block 'gcn' needs the in-degree of the rows (the strategy's attention.degrees); this attention has none"
        )
    return degrees


def aggregate(attention: Attention, v_nHD: torch.Tensor, kind: str) -> torch.Tensor:
    """[n, H, D] -> [n, H, D]: each row's mean ('sage') or GCN-normalised sum ('gcn') of its
    in-neighbours' v, by the attention with constant scores."""
    if kind == "gcn":
        d_n = row_degrees(attention).clamp_min(1).to(torch.float32)
        v_nHD = v_nHD * d_n.rsqrt().to(v_nHD.dtype)[:, None, None]
    y_nHD = attention(None, None, v_nHD)
    return y_nHD * d_n.sqrt().to(y_nHD.dtype)[:, None, None] if kind == "gcn" else y_nHD


class ConvBlock(nn.Module):
    """A GCN or SAGE layer, in_dim -> out_dim (module docstring); ``output``: the model's last layer
    (no residual, dropout or activation; out_dim the class count)."""

    def __init__(
        self,
        kind: str,
        in_dim: int,
        out_dim: int,
        heads: int,
        dropout: float,
        attention_dropout: float = 0.0,
        *,
        output: bool = False,
        norm: str = "none",
        norm_type: str = "layer",
        residual: str = "identity",
        global_attention: str = "none",
        ego: str = "loop",
    ):
        super().__init__()
        self.kind, self.heads, self.out_dim, self.output, self.norm_at = kind, heads, out_dim, output, norm
        self.head_dim = padded_head_dim(-(-out_dim // heads))
        normed = norm == "pre" or (norm == "post" and not output)  # the output block normalises only its input
        self.norm = make_norm(norm_type, in_dim if norm == "pre" else out_dim) if normed else None
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        self.root = ego_projection("sep" if kind == "sage" else ego, in_dim, out_dim)
        self.value_dropout = NodeDropout(attention_dropout, site=3)
        if not output:
            self.residual = Residual(residual, in_dim, out_dim)
            self.dropout = NodeDropout(dropout, site=1)
            self.global_attn = global_branch(global_attention, in_dim, out_dim, heads, dropout, attention_dropout)

    def forward(self, h_ni, attention: Attention, node_ids, seed: int, step: int, layer: int):
        x_ni = self.norm(h_ni, attention) if self.norm_at == "pre" else h_ni
        n, width = x_ni.shape[0], self.heads * self.head_dim
        v_nHD = F.pad(self.lin(x_ni), (0, width - self.out_dim)).view(n, self.heads, self.head_dim)
        v_nHD = self.value_dropout(v_nHD, node_ids, seed, step, layer)
        y_nd = aggregate(attention, v_nHD, self.kind).flatten(1)[:, : self.out_dim] + self.bias
        y_nd = with_ego(y_nd, self.root, x_ni)
        if self.output:
            return y_nd
        branch_nd = self.dropout(y_nd, node_ids, seed, step, layer)
        if self.global_attn is not None:
            branch_nd = branch_nd + self.global_attn(x_ni, attention, node_ids, seed, step, layer)
        h_nd = self.residual(h_ni, branch_nd)
        return F.elu(self.norm(h_nd, attention) if self.norm_at == "post" else h_nd)
