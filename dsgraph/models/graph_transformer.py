"""The Graph Transformer: input projection, L pre-LN blocks of sparse multi-head attention over
in-edges and a GELU FFN, final norm, node classifier.

The model sees only this rank's node rows; attention reaches other ranks' rows through the
graph-parallel ``attention`` strategy passed to ``forward``, so the same module serves 1 or P ranks.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from dsgraph.models.dropout import NodeDropout

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (q, k, v) -> y, all [n, H, D]


class TransformerBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn_mult: int, dropout: float, attention_dropout: float = 0.0):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not divisible by the head count {heads}")
        self.heads = heads
        self.attn_norm = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.ffn_norm = nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, ffn_mult * hidden), nn.GELU(), nn.Linear(ffn_mult * hidden, hidden))
        self.value_dropout = NodeDropout(attention_dropout, site=3)
        self.attn_dropout = NodeDropout(dropout, site=1)
        self.ffn_dropout = NodeDropout(dropout, site=2)

    def forward(self, h_nd, attention: Attention, node_ids, seed: int, step: int, layer: int):
        h_nd = self.attention_half(h_nd, attention, node_ids, seed, step, layer)
        return self.ffn_half(h_nd, node_ids, seed, step, layer)

    def attention_half(self, h_nd, attention: Attention, node_ids, seed: int, step: int, layer: int):
        """h + dropout(attn_out(attention(q, k, v of norm(h)))): the half activation checkpointing
        recomputes on its own (models/checkpointing.py)."""
        n, d = h_nd.shape
        q_nHD, k_nHD, v_nHD = self._qkv(self.attn_norm(h_nd))
        v_nHD = self.value_dropout(v_nHD, node_ids, seed, step, layer)
        y_nd = attention(q_nHD, k_nHD, v_nHD).reshape(n, d)
        return h_nd + self.attn_dropout(self.attn_out(y_nd), node_ids, seed, step, layer)

    def ffn_half(self, h_nd, node_ids, seed: int, step: int, layer: int):
        """h + dropout(ffn(norm(h)))."""
        return h_nd + self.ffn_dropout(self.ffn(self.ffn_norm(h_nd)), node_ids, seed, step, layer)

    def _qkv(self, x_nd):
        """q, k, v [n, H, D], each contiguous: one product per third of ``qkv``'s weight, so the
        attention kernels read them in place (slices of one [n, 3d] product would be copied there,
        3 x n x d more memory at the peak of forward and of backward)."""
        n, d = x_nd.shape
        weights, biases = self.qkv.weight.chunk(3), self.qkv.bias.chunk(3)
        return [F.linear(x_nd, w, b).view(n, self.heads, d // self.heads) for w, b in zip(weights, biases)]


class GraphTransformer(nn.Module):
    def __init__(
        self,
        in_dim: int,
        num_classes: int,
        *,
        hidden: int = 128,
        heads: int = 8,
        layers: int = 2,
        ffn_mult: int = 2,
        dropout: float = 0.5,
        input_dropout: float = 0.5,
        attention_dropout: float = 0.0,
        seed: int = 0,
    ):
        super().__init__()
        self.heads, self.seed = heads, seed
        self.input_dropout = NodeDropout(input_dropout, site=0)
        self.input = nn.Linear(in_dim, hidden)
        self.blocks = nn.ModuleList(TransformerBlock(hidden, heads, ffn_mult, dropout, attention_dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, x_nf: torch.Tensor, attention: Attention, node_ids: torch.Tensor, step: int = 0) -> torch.Tensor:
        """x_nf: this rank's node features [n, F]; node_ids: their global ids [n] (for dropout masks);
        step: the optimizer step (for dropout masks). Returns logits [n, num_classes]."""
        h_nd = self.input(self.input_dropout(x_nf, node_ids, self.seed, step, 0))
        for layer, block in enumerate(self.blocks, start=1):
            h_nd = block(h_nd, attention, node_ids, self.seed, step, layer)
        return self.classifier(self.norm(h_nd))
