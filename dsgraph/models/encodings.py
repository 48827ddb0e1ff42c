"""How node encodings enter the Graph Transformer (the model's ``encodings`` option; the arrays are
described in ``dsgraph/graph/encodings/``).

``NodeEncoder`` turns a rank's encoding arrays into one block per node: the stored encodings
('rwse' [n, K]; 'lappe' [n, k] eigenvectors, each multiplied by a random sign in training, and
their eigenvalues [n, k]) and, for 'degree', the sum of a learned embedding of the in-degree and
one of the out-degree (each capped at ``max_degree``; Graphormer's centrality encoding). With
``encoding_input`` 'concat' the block (stored encodings, then a ``degree_dim``-wide degree
embedding) is appended to the input features; with 'add' the stored encodings are projected to the
hidden width by a Linear and added after the input projection, with the degree embedding
(hidden wide).

LapPE's signs (an eigenvector v and -v are equally valid) are drawn from a generator seeded by
(seed, step) only, one sign per eigenvector for all nodes, so 1 or P ranks flip them alike.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from dsgraph.graph.encodings import arrays_of, chosen

SIGN_STREAM = 0x1A99E  # keeps the sign generator apart from other (seed, step) streams


def lappe_signs(seed: int, step: int, k: int) -> torch.Tensor:
    """float32 [k] of +-1: the sign of each LapPE eigenvector (each column of a ``signed`` array) at
    optimizer step ``step``."""
    bits = np.random.default_rng([seed, step, SIGN_STREAM]).integers(0, 2, k)
    return torch.from_numpy(2.0 * bits.astype(np.float32) - 1.0)


class NodeEncoder(nn.Module):
    """The encodings block of a node: [n, concat_width] to append ('concat'), or [n, hidden] to add
    ('add'). ``widths``: array name -> width in the data (``rwse``: K, ``lappe``: k, ``degree``: 2).
    What it does with each encoding is what the encoding's spec says (``dsgraph/graph/encodings/``):
    float arrays enter as they are (``signed`` ones with random signs in training), in registry
    order; counts are embedded by the spec's tables (``embeddings``), summed, and come last."""

    def __init__(
        self,
        names: tuple[str, ...],
        widths: dict[str, int],
        *,
        combine: str,
        hidden: int,
        max_degree: int,
        degree_dim: int,
    ):
        super().__init__()
        self.names, self.combine, self.max_degree = tuple(names), combine, max_degree
        missing = [a for a in arrays_of(self.names) if a not in widths]
        if missing:
            raise ValueError(f"the model reads encodings {list(self.names)}, but the data has no {', '.join(missing)}")
        specs = chosen(self.names)
        self.values = [a for spec in specs if not spec.embeddings for a in spec.arrays]
        self.signed = {a for spec in specs for a in spec.signed}
        self.counts = [(spec.arrays[0], spec.embeddings) for spec in specs if spec.embeddings]
        self.values_width = sum(widths[a] for a in self.values)
        self.project = nn.Linear(self.values_width, hidden) if combine == "add" and self.values_width else None
        width = hidden if combine == "add" else degree_dim
        for _, tables in self.counts:
            for table in tables:
                self.add_module(table, nn.Embedding(max_degree + 1, width))
        embedded = degree_dim if self.counts else 0
        self.concat_width = 0 if combine == "add" else self.values_width + embedded

    def forward(self, enc: dict[str, torch.Tensor] | None, seed: int, step: int, dtype: torch.dtype) -> torch.Tensor:
        """enc: this rank's encoding arrays ([n, w] each, counts such as 'degree' int64 [n, 2]).
        Returns the block in ``dtype``: [n, concat_width] ('concat') or [n, hidden] ('add')."""
        if enc is None or any(a not in enc for a in arrays_of(self.names)):
            raise ValueError(f"the model reads encodings {list(self.names)}, but its input carries {sorted(enc or {})}")
        parts = []
        for name in self.values:
            block = enc[name].to(dtype)
            if name in self.signed and self.training:
                block = block * lappe_signs(seed, step, block.shape[1]).to(device=block.device, dtype=dtype)
            parts.append(block)
        out = torch.cat(parts, dim=1) if parts else None
        if self.project is not None:
            out = self.project(out)
        if self.counts:
            embedded = self._embedded(enc).to(dtype)
            out = (
                embedded
                if out is None
                else (out + embedded if self.combine == "add" else torch.cat([out, embedded], 1))
            )
        return out

    def _embedded(self, enc: dict[str, torch.Tensor]) -> torch.Tensor:
        """The sum of every count column's embedding (in- plus out-degree)."""
        total = None
        for name, tables in self.counts:
            counts = enc[name].clamp(0, self.max_degree)
            for column, table in enumerate(tables):
                rows = getattr(self, table)(counts[:, column])
                total = rows if total is None else total + rows
        return total
