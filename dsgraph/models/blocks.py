"""The attention layers of the Graph Transformer. Each is ``block(h, attention, node_ids, seed, step,
layer)`` on this rank's rows: h [n, in_dim] -> [n, out_dim]; ``attention(q, k, v)`` is the
graph-parallel strategy ([n, H, D] each, returns [n, H, D]); ``node_ids`` (global ids), ``seed``,
``step`` and ``layer`` key the dropout masks, so 1 or P ranks drop the same elements.

Dropout sites (the ``site`` of NodeDropout; 0 is the model's input features): 1 the attention
output, 2 the FFN output, 3 each source node's value vector per head (GAT-style attention dropout),
4 and 5 the same two of the global branch (``global_attention.py``).

``ego`` 'sep' (``ego_projection``) adds the node's own projection h_i W_e to the attention over its
in-neighbours (the run then adds no self loops); ``norm_type`` picks LayerNorm or BatchNorm for the
norms (``norms.py``). GCN and SAGE layers are ``conv.py``'s.

``global_attention`` 'linear' adds a linear global attention over all nodes beside the local one,
as GraphGPS's layer does: both read the block's (normalised) input and their outputs are summed
with the residual, before the ELU or the FFN.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from dsgraph.models.checkpointing import recomputed
from dsgraph.models.dropout import NodeDropout
from dsgraph.models.global_attention import GlobalAttention
from dsgraph.models.norms import make_norm
from dsgraph.ops.cuda_source import HEAD_DIMS

Attention = Callable[..., torch.Tensor]  # (q, k, v[, bias]) -> y: q, k, v, y [n, H, D], bias [e, H]


class EdgeBias(nn.Module):
    """A layer's per-head score bias from the rank's edge features (Graphormer's edge encoding):
    b_ij = e'_ij W_b [e, H], e' = [edge_attr_ij, 1 if the model added the edge as a self loop]
    (``EdgeData.features``), so an added self loop's bias is a learned embedding (its row of W_b)
    rather than a function of made-up features. No constant term: the softmax of a row ignores it."""

    def __init__(self, edge_dim: int, heads: int):
        super().__init__()
        self.proj = nn.Linear(edge_dim + 1, heads, bias=False)

    def forward(self, attention) -> torch.Tensor:
        edges = getattr(attention, "edges", None)
        if edges is None:
            raise ValueError(
                "the model reads edge features (model.edge_features), but the attention holds none; "
                "load the graph with its edge features"
            )
        return self.proj(edges.features())


class EdgeValue(nn.Module):
    """TransformerConv's edge-conditioned value, sum_j a_ij (v_j + e'_ij W_e^h), computed exactly as
    y_i + z_i^h W_e^h with z_i^h = sum_j a_ij^h e'_ij (the attention's ``edge_values`` output): the
    projection [F_e + 1 -> D] per head runs once per row, never per edge."""

    def __init__(self, edge_dim: int, heads: int, head_dim: int):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.proj = nn.Linear(edge_dim + 1, heads * head_dim, bias=False)

    def forward(self, z_nHC: torch.Tensor) -> torch.Tensor:
        """[n, H, F_e + 1] -> [n, H, D]."""
        w_HDC = self.proj.weight.view(self.heads, self.head_dim, -1)
        return torch.einsum("nhc,hdc->nhd", z_nHC, w_HDC)


def attend(
    attention: Attention, q_nHD, k_nHD, v_nHD, bias: EdgeBias | None, value: EdgeValue | None = None
) -> torch.Tensor:
    """``attention(q, k, v)``, with the layer's score bias and edge-conditioned value when it has them."""
    if bias is None:
        return attention(q_nHD, k_nHD, v_nHD)
    if value is None:
        return attention(q_nHD, k_nHD, v_nHD, bias(attention))
    y_nHD, z_nHC = attention(q_nHD, k_nHD, v_nHD, bias(attention), attention.edges.features())
    return y_nHD + value(z_nHC)


def padded_head_dim(dim: int) -> int:
    """The smallest head dim the CUDA kernels support that holds ``dim`` values (``dim`` itself above 128)."""
    return next((d for d in HEAD_DIMS if d >= dim), dim)


def ego_projection(ego: str, in_dim: int, out_dim: int) -> nn.Linear | None:
    """``model.ego`` 'sep': the node's own projection h_i W_e [in_dim -> out_dim] (no bias: the
    aggregation's projections have theirs); 'loop': None (the node is one of its own neighbours)."""
    return nn.Linear(in_dim, out_dim, bias=False) if ego == "sep" else None


def with_ego(y_nd: torch.Tensor, ego: nn.Linear | None, x_ni: torch.Tensor) -> torch.Tensor:
    """The aggregation over in-neighbours plus the node's own projection, where the block has one."""
    return y_nd if ego is None else y_nd + ego(x_ni)


class Residual(nn.Module):
    """The skip path of a block: identity (only where the widths agree), a linear map h W_r, or none."""

    def __init__(self, kind: str, in_dim: int, out_dim: int):
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim, bias=False) if kind == "linear" else None
        self.identity = kind == "identity" and in_dim == out_dim

    def forward(self, h_ni: torch.Tensor, branch_nd: torch.Tensor) -> torch.Tensor:
        if self.linear is not None:
            return self.linear(h_ni) + branch_nd
        return h_ni + branch_nd if self.identity else branch_nd


class SplitLinear(nn.Linear):
    """A Linear whose output comes as ``parts`` tensors [n, heads, D] (q, k, v), each its own product
    with a slice of the weight, so each is contiguous and the attention kernels read it in place
    (slices of one [n, parts * heads * D] product would be copied there: parts x n x heads x D more
    memory at the peak). Parameters, their names and initialisation are the Linear's; calling the
    module (not its weight) keeps DeepSpeed's ZeRO-3 parameter gathering."""

    def __init__(self, in_features: int, out_features: int, parts: int, heads: int):
        super().__init__(in_features, out_features)
        self.parts, self.heads = parts, heads

    def forward(self, x_ni: torch.Tensor) -> list[torch.Tensor]:
        n = x_ni.shape[0]
        biases = self.bias.chunk(self.parts) if self.bias is not None else [None] * self.parts
        return [F.linear(x_ni, w, b).view(n, self.heads, -1) for w, b in zip(self.weight.chunk(self.parts), biases)]


def before_attention(block, norm, h_ni, attention: Attention, node_ids, seed: int, step: int, layer: int):
    """What a block computes before its attention, from its input h: (q, k, v, the ego projection or
    None, the global branch's output or None), with ``norm`` applied first when the block normalises
    before ('pre'). Under selective recomputation this is one recomputed region."""
    x_ni = norm(h_ni, attention) if block.norm_at == "pre" else h_ni
    q_nHD, k_nHD, v_nHD = block.qkv(x_ni)
    v_nHD = block.value_dropout(v_nHD, node_ids, seed, step, layer)
    ego_nd = block.ego(x_ni) if block.ego is not None else None
    glob = block.global_attn
    return q_nHD, k_nHD, v_nHD, ego_nd, glob(x_ni, attention, node_ids, seed, step, layer) if glob else None


def global_branch(kind: str, in_dim: int, hidden: int, heads: int, dropout: float, attention_dropout: float):
    """The block's global attention branch (``global_attention`` 'linear'), or None ('none')."""
    return GlobalAttention(in_dim, hidden, heads, dropout, attention_dropout) if kind == "linear" else None


class AttentionBlock(nn.Module):
    """A GAT layer with scaled dot-product scores: h -> ELU(residual(h) + dropout(concat_h y_h)) with
    y_h = attention over in-edges of (h W_q, h W_k, dropout(h W_v)) (Velickovic et al., ICLR 2018; the
    dot-product score is Vaswani et al. 2017's). ``norm`` 'pre' normalises h before the projections,
    'post' the sum before the ELU. ``global_attention`` 'linear' adds the global branch to the sum."""

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        heads: int,
        dropout: float,
        attention_dropout: float = 0.0,
        *,
        norm: str = "none",
        residual: str = "identity",
        global_attention: str = "none",
        edge_dim: int = 0,
        edge_values: bool = False,
        norm_type: str = "layer",
        ego: str = "loop",
    ):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not divisible by the head count {heads}")
        self.heads, self.norm_at = heads, norm
        self.norm = make_norm(norm_type, in_dim if norm == "pre" else hidden) if norm != "none" else None
        self.qkv = SplitLinear(in_dim, 3 * hidden, 3, heads)
        self.ego = ego_projection(ego, in_dim, hidden)
        self.residual = Residual(residual, in_dim, hidden)
        self.value_dropout = NodeDropout(attention_dropout, site=3)
        self.attn_dropout = NodeDropout(dropout, site=1)
        self.edge_bias = EdgeBias(edge_dim, heads) if edge_dim else None
        self.edge_value = EdgeValue(edge_dim, heads, hidden // heads) if edge_dim and edge_values else None
        self.global_attn = global_branch(global_attention, in_dim, hidden, heads, dropout, attention_dropout)

    recompute = False
    """Selective recomputation (``checkpointing.recompute_selectively``): keep the attention's own
    tensors and the block's input, recompute the rest in backward."""

    def forward(self, h_ni, attention: Attention, node_ids, seed: int, step: int, layer: int):
        keys = (attention, node_ids, seed, step, layer)
        q_nHD, k_nHD, v_nHD, ego_nd, global_nd = recomputed(self.recompute, self._before_attention, h_ni, *keys)
        y_nd = attend(attention, q_nHD, k_nHD, v_nHD, self.edge_bias, self.edge_value).flatten(1)
        return recomputed(self.recompute, self._after_attention, h_ni, y_nd, ego_nd, global_nd, *keys)

    def _before_attention(self, h_ni, *keys):
        return before_attention(self, self.norm, h_ni, *keys)

    def _after_attention(self, h_ni, y_nd, ego_nd, global_nd, attention, node_ids, seed: int, step: int, layer: int):
        y_nd = y_nd if ego_nd is None else y_nd + ego_nd
        branch_nd = self.attn_dropout(y_nd, node_ids, seed, step, layer)
        branch_nd = branch_nd if global_nd is None else branch_nd + global_nd
        h_nd = self.residual(h_ni, branch_nd)
        return F.elu(self.norm(h_nd, attention) if self.norm_at == "post" else h_nd)


class TransformerBlock(nn.Module):
    """Attention -> W_o -> dropout -> residual, then a GELU FFN -> dropout -> residual (Vaswani et al.
    2017), with LayerNorms before each sublayer ('pre', the default here), after each residual sum
    ('post') or none. ``in_dim`` (default ``hidden``): the width of the block's input.
    ``global_attention`` 'linear': the attention sublayer also runs the global branch on the same
    normalised input and adds it to the residual sum (GraphGPS's GPSLayer)."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        ffn_mult: int,
        dropout: float,
        attention_dropout: float = 0.0,
        *,
        in_dim: int | None = None,
        norm: str = "pre",
        residual: str = "identity",
        global_attention: str = "none",
        edge_dim: int = 0,
        edge_values: bool = False,
        norm_type: str = "layer",
        ego: str = "loop",
    ):
        super().__init__()
        in_dim = hidden if in_dim is None else in_dim
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not divisible by the head count {heads}")
        self.heads, self.norm_at = heads, norm
        self.attn_norm = make_norm(norm_type, in_dim if norm == "pre" else hidden) if norm != "none" else None
        self.qkv = SplitLinear(in_dim, 3 * hidden, 3, heads)
        self.attn_out = nn.Linear(hidden, hidden)
        self.ego = ego_projection(ego, in_dim, hidden)
        self.residual = Residual(residual, in_dim, hidden)
        self.ffn_norm = make_norm(norm_type, hidden) if norm != "none" else None
        self.ffn = nn.Sequential(nn.Linear(hidden, ffn_mult * hidden), nn.GELU(), nn.Linear(ffn_mult * hidden, hidden))
        self.value_dropout = NodeDropout(attention_dropout, site=3)
        self.attn_dropout = NodeDropout(dropout, site=1)
        self.ffn_dropout = NodeDropout(dropout, site=2)
        self.edge_bias = EdgeBias(edge_dim, heads) if edge_dim else None
        self.edge_value = EdgeValue(edge_dim, heads, hidden // heads) if edge_dim and edge_values else None
        self.global_attn = global_branch(global_attention, in_dim, hidden, heads, dropout, attention_dropout)

    sublayers = ("attention_sublayer", "ffn_sublayer")
    """What activation checkpointing recomputes one at a time (``checkpointing.py``): the backward
    then holds one sublayer's activations, not the whole block's."""

    recompute = False
    """Selective recomputation (``checkpointing.recompute_selectively``): keep the attention's own
    tensors, the block's input and the attention's output; recompute the rest in backward."""

    def forward(self, h_ni, attention: Attention, node_ids, seed: int, step: int, layer: int):
        if self.recompute:
            keys = (attention, node_ids, seed, step, layer)
            q_nHD, k_nHD, v_nHD, ego_nd, global_nd = recomputed(True, self._before_attention, h_ni, *keys)
            y_nd = attend(attention, q_nHD, k_nHD, v_nHD, self.edge_bias, self.edge_value).flatten(1)
            return recomputed(True, self._after_attention_and_ffn, h_ni, y_nd, ego_nd, global_nd, *keys)
        h_nd = self.attention_sublayer(h_ni, attention, node_ids, seed, step, layer)
        return self.ffn_sublayer(h_nd, attention, node_ids, seed, step, layer)

    def attention_sublayer(self, h_ni, attention: Attention, node_ids, seed: int, step: int, layer: int):
        keys = (attention, node_ids, seed, step, layer)
        q_nHD, k_nHD, v_nHD, ego_nd, global_nd = self._before_attention(h_ni, *keys)
        y_nd = attend(attention, q_nHD, k_nHD, v_nHD, self.edge_bias, self.edge_value).flatten(1)
        return self._after_attention(h_ni, y_nd, ego_nd, global_nd, *keys)

    def _before_attention(self, h_ni, *keys):
        return before_attention(self, self.attn_norm, h_ni, *keys)

    def _after_attention(self, h_ni, y_nd, ego_nd, global_nd, attention, node_ids, seed: int, step: int, layer: int):
        out_nd = self.attn_out(y_nd)
        branch_nd = self.attn_dropout(out_nd if ego_nd is None else out_nd + ego_nd, node_ids, seed, step, layer)
        branch_nd = branch_nd if global_nd is None else branch_nd + global_nd
        h_nd = self.residual(h_ni, branch_nd)
        return self.attn_norm(h_nd, attention) if self.norm_at == "post" else h_nd

    def _after_attention_and_ffn(self, h_ni, y_nd, ego_nd, global_nd, *keys):
        return self.ffn_sublayer(self._after_attention(h_ni, y_nd, ego_nd, global_nd, *keys), *keys)

    def ffn_sublayer(self, h_nd, attention: Attention, node_ids, seed: int, step: int, layer: int):
        pre, post = self.norm_at == "pre", self.norm_at == "post"
        x_nd = self.ffn_norm(h_nd, attention) if pre else h_nd
        h_nd = h_nd + self.ffn_dropout(self.ffn(x_nd), node_ids, seed, step, layer)
        return self.ffn_norm(h_nd, attention) if post else h_nd


class OutputAttention(nn.Module):
    """GAT's output layer with dot-product scores: H heads attend over in-edges with values that are
    class logits; the heads are averaged (Velickovic et al. 2018, eq. 6). h [n, in_dim] -> logits
    [n, C]. The value (and score) head dim is C zero-padded to ``padded_head_dim(C)`` so the CUDA
    kernels run it; the padding is sliced off. ``norm`` 'pre' normalises h first."""

    def __init__(
        self,
        in_dim: int,
        num_classes: int,
        heads: int,
        attention_dropout: float = 0.0,
        *,
        norm: str = "none",
        edge_dim: int = 0,
        edge_values: bool = False,
        norm_type: str = "layer",
        ego: str = "loop",
    ):
        super().__init__()
        self.heads, self.classes, self.head_dim = heads, num_classes, padded_head_dim(num_classes)
        self.norm = make_norm(norm_type, in_dim) if norm == "pre" else None
        self.ego = ego_projection(ego, in_dim, num_classes)
        self.qk = SplitLinear(in_dim, 2 * heads * self.head_dim, 2, heads)
        self.value = nn.Linear(in_dim, heads * num_classes)
        self.value_dropout = NodeDropout(attention_dropout, site=3)
        self.edge_bias = EdgeBias(edge_dim, heads) if edge_dim else None
        self.edge_value = EdgeValue(edge_dim, heads, self.head_dim) if edge_dim and edge_values else None

    def forward(self, h_ni, attention: Attention, node_ids, seed: int, step: int, layer: int):
        x_ni = self.norm(h_ni, attention) if self.norm is not None else h_ni
        q_nHD, k_nHD = self.qk(x_ni)
        v_nHC = self.value(x_ni).view(-1, self.heads, self.classes)
        v_nHD = F.pad(v_nHC, (0, self.head_dim - self.classes))
        v_nHD = self.value_dropout(v_nHD, node_ids, seed, step, layer)
        y_nC = attend(attention, q_nHD, k_nHD, v_nHD, self.edge_bias, self.edge_value)[..., : self.classes].mean(1)
        return with_ego(y_nC, self.ego, x_ni)
