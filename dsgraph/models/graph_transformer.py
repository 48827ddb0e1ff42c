"""The Graph Transformer: L layers of multi-head scaled dot-product attention over each node's
in-edges, arranged as ``options`` says (``options.py``). The default is the pre-LN Transformer
block with linear global attention beside the local one and a per-node classifier
(``options.TRANSFORMER`` is that without the global branch). ``options.GAT`` is GAT's shape
(Velickovic et al., ICLR 2018) with dot-product scores: the first layer attends over the features,
hidden layers are ELU(h + dropout(attention)), and the last layer attends with class logits as
values, averaged over the heads.

Blocks 'gcn' and 'sage' (``conv.py``) run GCN's and GraphSAGE's aggregation through the same
attention; ``options.jk`` feeds a linear head every block's output (jumping knowledge).
``options.propagation_steps`` propagates the logits by APPNP (``propagation.py``) over the same path.

Node encodings (``options.encodings``: RWSE, LapPE, degree) enter through ``encodings.NodeEncoder``,
appended to the input features or added after the input projection. Edge features
(``options.edge_features``) become a per-head score bias in every layer (``blocks.EdgeBias``) and,
optionally, an edge-conditioned value (``blocks.EdgeValue``).

The model sees only this rank's node rows; attention reaches other ranks' rows through the
graph-parallel ``attention`` strategy passed to ``forward``, so the same module serves 1 or P ranks.
Every attention layer is an element of ``self.blocks`` (an nn.ModuleList) with the forward
``block(h, attention, node_ids, seed, step, layer)``.
"""

from __future__ import annotations

import torch
from torch import nn

from dsgraph.models.blocks import Attention, AttentionBlock, OutputAttention, TransformerBlock
from dsgraph.models.conv import ConvBlock
from dsgraph.models.dropout import NodeDropout
from dsgraph.models.encodings import NodeEncoder
from dsgraph.models.norms import make_norm
from dsgraph.models.options import CONV_BLOCKS, ModelOptions
from dsgraph.models.propagation import propagate

__all__ = ["Attention", "AttentionBlock", "GraphTransformer", "OutputAttention", "TransformerBlock"]


def _hidden_block(
    o: ModelOptions,
    in_dim: int,
    hidden: int,
    heads: int,
    ffn_mult: int,
    dropout: float,
    attention_dropout: float,
    edge_dim: int,
):
    frame = dict(norm=o.norm, norm_type=o.norm_type, residual=o.residual, global_attention=o.global_attention)
    if o.block in CONV_BLOCKS:
        return ConvBlock(o.block, in_dim, hidden, heads, dropout, attention_dropout, ego=o.ego, **frame)
    edges = dict(edge_dim=edge_dim, edge_values=o.edge_features == "bias_value", ego=o.ego)
    if o.block == "transformer":
        return TransformerBlock(
            hidden,
            heads,
            ffn_mult,
            dropout,
            attention_dropout,
            in_dim=in_dim,
            **frame,
            **edges,
        )
    return AttentionBlock(in_dim, hidden, heads, dropout, attention_dropout, **frame, **edges)


def _output_block(o: ModelOptions, width: int, num_classes: int, heads: int, attention_dropout: float, edge_dim: int):
    """The last layer for head 'attention': the block kind's own layer with class logits as values."""
    if o.block in CONV_BLOCKS:
        return ConvBlock(
            o.block, width, num_classes, heads, 0.0, attention_dropout, output=True, norm=o.norm, norm_type=o.norm_type
        )
    return OutputAttention(
        width,
        num_classes,
        heads,
        attention_dropout,
        norm=o.norm,
        norm_type=o.norm_type,
        ego=o.ego,
        edge_dim=edge_dim,
        edge_values=o.edge_features == "bias_value",
    )


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
        options: ModelOptions | None = None,
        encoding_widths: dict[str, int] | None = None,
        edge_dim: int = 0,
    ):
        """``layers`` counts attention layers, the output attention layer included (head 'attention');
        ``encoding_widths``: the width of each encoding array in the data (``NodeEncoder``), needed
        when ``options.encodings`` names any; ``edge_dim``: F_e of the dataset's edge features (read
        when ``options.edge_features`` says so)."""
        super().__init__()
        o = ModelOptions() if options is None else options
        if layers < 1:
            raise ValueError(f"a Graph Transformer needs at least one attention layer, got layers={layers}")
        if o.reads_edges and edge_dim < 1:
            raise ValueError(
                f"model.edge_features is '{o.edge_features}', but the dataset has no edge features (edge_attr); "
                'use a dataset with them, or set model.edge_features to "none"'
            )
        edge_dim = edge_dim if o.reads_edges else 0
        self.heads, self.seed, self.options = heads, seed, o
        self.input_dropout = NodeDropout(input_dropout, site=0)
        self.encoder = None
        if o.encodings:
            self.encoder = NodeEncoder(
                o.encodings,
                encoding_widths or {},
                combine=o.encoding_input,
                hidden=hidden,
                max_degree=o.max_degree,
                degree_dim=o.degree_dim,
            )
            in_dim += self.encoder.concat_width
        self.input = nn.Linear(in_dim, hidden) if o.input_projection else None
        width = hidden if o.input_projection else in_dim
        hidden_layers = layers - 1 if o.head == "attention" else layers
        if o.global_attention != "none" and hidden_layers == 0:
            raise ValueError(
                f"global_attention '{o.global_attention}' needs a hidden block: with head 'attention' (the output "
                "layer stays local) use layers >= 2"
            )
        blocks = [
            _hidden_block(o, width if i == 0 else hidden, hidden, heads, ffn_mult, dropout, attention_dropout, edge_dim)
            for i in range(hidden_layers)
        ]
        width = hidden if hidden_layers else width
        if o.head == "attention":
            blocks.append(_output_block(o, width, num_classes, heads, attention_dropout, edge_dim))
        self.blocks = nn.ModuleList(blocks)
        width = hidden_layers * hidden if o.jk == "cat" else width
        self.norm = make_norm(o.norm_type, width) if o.head == "linear" and o.norm == "pre" else None
        self.classifier = nn.Linear(width, num_classes) if o.head == "linear" else None

    def forward(
        self,
        x_nf: torch.Tensor,
        attention: Attention,
        node_ids: torch.Tensor,
        step: int = 0,
        enc: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """x_nf: this rank's node features [n, F]; node_ids: their global ids [n] (for dropout masks);
        step: the optimizer step (for dropout masks and LapPE's signs); enc: the rows' encoding arrays
        (``NodeData.enc``) when the model reads encodings. Returns logits [n, num_classes]."""
        return self.embed(x_nf, attention, node_ids, step, enc)[0]

    def embed(
        self,
        x_nf: torch.Tensor,
        attention: Attention,
        node_ids: torch.Tensor,
        step: int = 0,
        enc: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [n, num_classes], embeddings [n, d]): the embeddings are the input of the output
        layer (the output attention layer, or the classifier after its norm); the logits are the
        output layer's, propagated by APPNP when ``options.propagation_steps`` says so."""
        if self.options.feature_norm == "row":
            x_nf = (x_nf.float() / x_nf.float().abs().sum(1, keepdim=True).clamp_min(1e-12)).to(x_nf.dtype)
        h = self.input_dropout(x_nf, node_ids, self.seed, step, 0)
        extra = self.encoder(enc, self.seed, step, h.dtype) if self.encoder is not None else None
        if extra is not None and self.options.encoding_input == "concat":
            h = torch.cat([h, extra], dim=1)
        if self.input is not None:
            h = self.input(h)
        if extra is not None and self.options.encoding_input == "add":
            h = h + extra
        last = len(self.blocks) if self.classifier is not None else len(self.blocks) - 1
        outputs = []
        for layer, block in enumerate(self.blocks[:last], start=1):
            h = block(h, attention, node_ids, self.seed, step, layer)
            outputs.append(h)
        if self.classifier is not None:
            h = _jump(self.options.jk, outputs) if self.options.jk != "none" else h
            h = self.norm(h, attention) if self.norm is not None else h
            z = self.classifier(h)
        else:
            z = self.blocks[last](h, attention, node_ids, self.seed, step, last + 1)
        o = self.options
        return propagate(z, attention, self.heads, o.propagation_steps, o.propagation_alpha), h


def _jump(jk: str, outputs: list[torch.Tensor]) -> torch.Tensor:
    """Jumping knowledge over the blocks' outputs [n, d] each: 'cat' [n, L d] or 'max' [n, d]."""
    return torch.cat(outputs, dim=1) if jk == "cat" else torch.stack(outputs).amax(0)
