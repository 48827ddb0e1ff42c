"""Link prediction: the Graph Transformer as an encoder of node embeddings, and a pair decoder.

The encoder is the unchanged ``GraphTransformer`` whose output width is the embedding width: its
output layer (the output attention layer, or the linear head) is the embedding head. A decoder
turns the embeddings of a pair (u, v) into a score (a logit: sigmoid(score) is the probability of
an edge):

- ``dot``: <z_u, z_v> (the graph auto-encoder's inner-product decoder, Kipf and Welling 2016);
- ``mlp``: an MLP on the Hadamard product z_u * z_v (Linear -> ReLU -> Linear), the decoder of
  the OGB link baselines.

Both are symmetric in u and v. The pairs come as an object with ``fetch(z) -> (z_u, z_v)``
(``dsgraph.comm.pairs.PairRows``), which brings the rows of v from the rank that owns them.
"""

from __future__ import annotations

import torch
from torch import nn

from dsgraph.models.graph_transformer import GraphTransformer

DECODERS = ("dot", "mlp")


class DotDecoder(nn.Module):
    def forward(self, z_u: torch.Tensor, z_v: torch.Tensor) -> torch.Tensor:
        """[m, d] each -> scores [m], summed in fp32."""
        return (z_u.float() * z_v.float()).sum(-1)


class MlpDecoder(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.hidden = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, z_u: torch.Tensor, z_v: torch.Tensor) -> torch.Tensor:
        """[m, d] each -> scores [m]."""
        return self.out(torch.relu(self.hidden(z_u * z_v))).squeeze(-1)


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

    def forward(self, x_nf: torch.Tensor, attention, node_ids: torch.Tensor, step: int = 0, pairs=None) -> torch.Tensor:
        """This rank's node embeddings z [n, d] without ``pairs``; with them, the scores [m] of the
        pairs this rank is responsible for (collective: every rank passes its own pairs)."""
        z_nd = self.encoder(x_nf, attention, node_ids, step)
        return z_nd if pairs is None else self.score(z_nd, pairs)

    def score(self, z_nd: torch.Tensor, pairs) -> torch.Tensor:
        return self.decoder(*pairs.fetch(z_nd))
