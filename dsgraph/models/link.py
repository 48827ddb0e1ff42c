"""Link prediction: the Graph Transformer as an encoder of node embeddings, and a pair decoder.

The encoder is the unchanged ``GraphTransformer`` whose output width is the embedding width: its
output layer (the output attention layer, or the linear head) is the embedding head. A decoder
turns the embeddings of a pair (u, v) into a score (a logit: sigmoid(score) is the probability of
an edge):

- ``dot``: <z_u, z_v> (the graph auto-encoder's inner-product decoder, Kipf and Welling 2016);
- ``mlp``: an MLP on the Hadamard product z_u * z_v (Linear -> ReLU -> Linear), the decoder of
  the OGB link baselines.

Both are symmetric in u and v. The pairs come as an object with ``table(z) -> (table, u_index,
v_index)`` (``dsgraph.comm.pairs.PairRows``), which brings the rows of v from the rank that owns
them: pair i joins table[u_index[i]] and table[v_index[i]]. The dot decoder never holds the pairs'
rows [m, d]: ``pair_dot`` gathers them a chunk of pairs at a time, in forward and again in backward,
so a step over millions of pairs keeps O(chunk x d) beside the scores.
"""

from __future__ import annotations

import torch
from torch import nn

from dsgraph.models.graph_transformer import GraphTransformer

DECODERS = ("dot", "mlp")
CHUNK = 1 << 16  # pairs gathered at a time by pair_dot


class _PairDot(torch.autograd.Function):
    """scores[i] = <table[u[i]], table[v[i]]> in fp32, chunk by chunk; backward scatters
    g[i] * table[v[i]] into row u[i] and g[i] * table[u[i]] into row v[i] (fp32 sums)."""

    @staticmethod
    def forward(ctx, table, u, v):
        ctx.save_for_backward(table, u, v)
        out = torch.empty(u.numel(), dtype=torch.float32, device=table.device)
        for lo in range(0, u.numel(), CHUNK):
            t_u, t_v = (table.index_select(0, i[lo : lo + CHUNK]).float() for i in (u, v))
            out[lo : lo + CHUNK] = (t_u * t_v).sum(1)
        return out

    @staticmethod
    def backward(ctx, grad):
        table, u, v = ctx.saved_tensors
        acc = torch.zeros(table.shape, dtype=torch.float32, device=table.device)
        for lo in range(0, u.numel(), CHUNK):
            g = grad[lo : lo + CHUNK, None].float()
            u_c, v_c = u[lo : lo + CHUNK], v[lo : lo + CHUNK]
            acc.index_add_(0, u_c, g * table.index_select(0, v_c).float())
            acc.index_add_(0, v_c, g * table.index_select(0, u_c).float())
        return acc.to(table.dtype), None, None


def pair_dot(table: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """table [r, d], u and v int64 [m] -> fp32 scores [m] = (table[u] * table[v]).sum(1), without
    the [m, d] gathers (``_PairDot``)."""
    return _PairDot.apply(table, u, v)


class DotDecoder(nn.Module):
    def forward(self, table: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Rows [r, d], pair indices [m] each -> scores [m], summed in fp32."""
        return pair_dot(table, u, v)


class MlpDecoder(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.hidden = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, table: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Rows [r, d], pair indices [m] each -> scores [m]."""
        return self.out(torch.relu(self.hidden(table.index_select(0, u) * table.index_select(0, v)))).squeeze(-1)


def make_decoder(kind: str, dim: int, hidden: int) -> nn.Module:
    if kind == "dot":
        return DotDecoder()
    if kind == "mlp":
        return MlpDecoder(dim, hidden)
    raise ValueError(f"link decoder must be one of {', '.join(DECODERS)}; got {kind!r}")


class LinkPredictor(nn.Module):
    """``encoder`` (a GraphTransformer of output width d) and ``decoder``; ``blocks`` are the
    encoder's (activation checkpointing reads them)."""

    def __init__(self, encoder: GraphTransformer, decoder: nn.Module):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    @property
    def blocks(self) -> nn.ModuleList:
        return self.encoder.blocks

    def forward(
        self,
        x_nf: torch.Tensor,
        attention,
        node_ids: torch.Tensor,
        step: int = 0,
        enc: dict[str, torch.Tensor] | None = None,
        pairs=None,
    ) -> torch.Tensor:
        """This rank's node embeddings z [n, d] without ``pairs``; with them, the scores [m] of the
        pairs this rank is responsible for (collective: every rank passes its own pairs). ``enc``:
        the rows' encoding arrays, as the encoder's."""
        z_nd = self.encoder(x_nf, attention, node_ids, step, enc)
        return z_nd if pairs is None else self.score(z_nd, pairs)

    def score(self, z_nd: torch.Tensor, pairs) -> torch.Tensor:
        return self.decoder(*pairs.table(z_nd))
