"""APPNP's propagation of the logits (Klicpera et al., ICLR 2019, "Predict then Propagate";
``model.propagation_steps``, ``model.propagation_alpha``).

After the model's logits z0 = f(x), K steps of personalised PageRank:
z <- (1 - alpha) A_hat z + alpha z0, with A_hat = D^-1/2 A D^-1/2 GCN's symmetric normalisation over
the graph the layers attend over (its self loops when the run adds them; d the in-degree there).
Each step is ``conv.aggregate(attention, z, "gcn")``, the attention with constant scores, so it runs
through whatever strategy, mode, backend and dtype the run uses and moves the logits alone (no q, k
or scores). The C class logits are spread over the model's H heads as GCN's output layer spreads
them (C zero-padded to H x ``padded_head_dim(ceil(C / H))``): head-split strategies keep their
H / P heads per rank and the CUDA kernels a head dim they support. In sampled mode the graph is the
rank's sampled subgraph (as APPNP on a NeighborLoader batch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dsgraph.models.blocks import Attention, padded_head_dim
from dsgraph.models.conv import aggregate


def propagate(z_nC: torch.Tensor, attention: Attention, heads: int, steps: int, alpha: float) -> torch.Tensor:
    """[n, C] logits -> [n, C]: ``steps`` APPNP steps over the attention's graph (identity for 0),
    in the logits' dtype."""
    if steps == 0:
        return z_nC
    n, classes = z_nC.shape
    head_dim = padded_head_dim(-(-classes // heads))
    z0_nHD = F.pad(z_nC, (0, heads * head_dim - classes)).view(n, heads, head_dim)
    z_nHD = z0_nHD
    for _ in range(steps):
        z_nHD = (1.0 - alpha) * aggregate(attention, z_nHD, "gcn") + alpha * z0_nHD
    return z_nHD.flatten(1)[:, :classes]
