"""dsgraph's sparse attention and Graph Transformer step beside PyG's and DGL's, as small objects.

Kernels: ``KERNELS[name](rowptr, col)`` returns attention(q, k, v) -> y, all [N, H, D], scale
D^-0.5, y_i = sum over the in-edges j -> i of softmax_j(<q_i, k_j>) v_j:
  dsgraph  ``sparse_attention(backend="cpu" or "cuda")``: fused kernels, no E x H x D tensor
  pyg      PyG-style message passing (``bench_kernels.pyg_attention``): gather q_i and k_j per edge,
           ``torch_geometric.utils.softmax``, gather v_j, scatter-sum (dsgraph's torch reference
           where PyG is not installed)
  dgl      DGL 2.1's sparse ops: ``u_dot_v``, ``edge_softmax``, ``u_mul_e_sum`` (needs dgl, which
           lives in its own environment, .venv-dgl: see tools/test_dgl_lane.sh)

Training steps: ``build(name, graph, hidden, heads, layers)`` returns an object whose ``step()`` runs
one full-graph training step (forward, cross-entropy on the training nodes, backward, Adam) and
returns the loss. The same shape for all: input Linear, ``layers`` pre-LayerNorm blocks (attention
with an output Linear, GELU FFN x2, dropout 0.1), final LayerNorm, classifier; fp32.
  dsgraph  dsgraph's ``GraphTransformer`` with ``sparse_attention``
  dgl      the same ``GraphTransformer`` module with DGL's attention above
  pyg      ``torch_geometric.nn.TransformerConv`` blocks (tools/benchmarks/bench_models.py's ``pyg_model``)
``graph`` is a dsgraph ``Graph`` (rowptr, col, x, y, train_mask); the caller decides about self loops.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F

FFN_MULT, DROPOUT, LEARNING_RATE = 2, 0.1, 1e-3


def destinations(rowptr: torch.Tensor) -> torch.Tensor:
    """The destination row of every CSR edge, int64 [E]."""
    return torch.repeat_interleave(torch.arange(rowptr.numel() - 1, device=rowptr.device), rowptr[1:] - rowptr[:-1])


def dsgraph_kernel(rowptr, col):
    from dsgraph.ops import sparse_attention

    backend = "cuda" if rowptr.is_cuda else "cpu"
    return lambda q, k, v: sparse_attention(rowptr, col, q, k, v, backend=backend)


def pyg_kernel(rowptr, col):
    """PyG's message passing (bench_kernels.pyg_attention); without PyG, dsgraph's torch reference."""
    from dsgraph.ops.reference import sparse_attention_reference
    from tools.benchmarks.bench_kernels import pyg_attention

    pyg, dst = pyg_attention(), destinations(rowptr)
    if pyg is None:
        return lambda q, k, v: sparse_attention_reference(rowptr, col, q, k, v, q.shape[-1] ** -0.5)
    return lambda q, k, v: pyg(rowptr, col, q, k, v, dst)


def dgl_kernel(rowptr, col):
    import dgl
    from dgl.nn.functional import edge_softmax

    g = dgl.graph((col.long(), destinations(rowptr)), num_nodes=rowptr.numel() - 1)

    def attention(q, k, v):
        scores_EH1 = dgl.ops.u_dot_v(g, k, q) * q.shape[-1] ** -0.5  # edge u -> v: <k_u, q_v>
        return dgl.ops.u_mul_e_sum(g, v, edge_softmax(g, scores_EH1))

    return attention


KERNELS = {"dsgraph": dsgraph_kernel, "pyg": pyg_kernel, "dgl": dgl_kernel}


class Peer:
    """One model on one graph, trained full-graph: ``step()`` returns the loss of one step."""

    def __init__(self, model: torch.nn.Module, forward, graph):
        self.model, self.forward = model, forward
        self.optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
        self.x, self.y, self.train = graph.x.float(), graph.y, graph.train_mask
        self.steps = 0

    def step(self) -> float:
        loss = F.cross_entropy(self.forward(self.x, self.steps)[self.train], self.y[self.train])
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.steps += 1
        return float(loss.detach())


def _graph_transformer(graph, hidden: int, heads: int, layers: int, attention) -> Peer:
    from dsgraph.models import GraphTransformer
    from dsgraph.models.options import TRANSFORMER

    torch.manual_seed(0)
    model = GraphTransformer(
        graph.x.shape[1],
        graph.num_classes,
        hidden=hidden,
        heads=heads,
        layers=layers,
        ffn_mult=FFN_MULT,
        dropout=DROPOUT,
        input_dropout=0.0,
        attention_dropout=0.0,
        options=TRANSFORMER,
    )
    node_ids = torch.arange(graph.num_nodes)
    return Peer(model, lambda x, step: model(x, attention, node_ids, step), graph)


def build_dsgraph(graph, hidden: int, heads: int, layers: int) -> Peer:
    return _graph_transformer(graph, hidden, heads, layers, dsgraph_kernel(graph.rowptr, graph.col))


def build_dgl(graph, hidden: int, heads: int, layers: int) -> Peer:
    return _graph_transformer(graph, hidden, heads, layers, dgl_kernel(graph.rowptr, graph.col))


def build_pyg(graph, hidden: int, heads: int, layers: int) -> Peer:
    from tools.benchmarks.bench_models import pyg_model

    torch.manual_seed(0)
    shape = SimpleNamespace(hidden=hidden, heads=heads, layers=layers, ffn_mult=FFN_MULT, dropout=DROPOUT)
    model = pyg_model(graph.x.shape[1], graph.num_classes, shape)
    edge_index = torch.stack([graph.col.long(), destinations(graph.rowptr)])
    return Peer(model, lambda x, step: model(x, edge_index), graph)


BUILDERS = {"dsgraph": build_dsgraph, "pyg": build_pyg, "dgl": build_dgl}


def build(name: str, graph, hidden: int = 128, heads: int = 8, layers: int = 2) -> Peer:
    """The training step of model ``name`` (dsgraph, pyg or dgl) on ``graph``; see the module doc."""
    if name not in BUILDERS:
        raise ValueError(f"peer model '{name}': choose from {', '.join(BUILDERS)}")
    return BUILDERS[name](graph, hidden, heads, layers)
