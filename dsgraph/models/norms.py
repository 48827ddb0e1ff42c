"""The normalisations ``model.norm`` places (``model.norm_type``): each is ``norm(h, attention)`` on
this rank's rows, h [n, d] -> [n, d].

LayerNorm normalises each row by itself. BatchNorm normalises each feature by its mean and variance
over the nodes of the attention's ``global_scope()`` (every row of the graph split over the ranks in
full-graph training, the global batch's seeds in sampled mode, the rank's subgraph in isolated mode):
each rank sums x and x^2 of its rows in fp64 and one all-reduce adds the ranks' sums, so the
statistics, and the gradient through them, are those of one process holding every row (PyG's
BatchNorm on the full graph). Evaluation reads the running statistics, updated from the same
global ones (the unbiased variance, as torch's BatchNorm keeps).
"""

from __future__ import annotations

import torch
from torch import nn

from dsgraph.models.global_attention import scope_of


class LayerNorm(nn.LayerNorm):
    """torch's LayerNorm (same parameters and names) called as ``norm(h, attention)``."""

    def forward(self, x: torch.Tensor, attention=None) -> torch.Tensor:
        return super().forward(x)


class BatchNorm(nn.Module):
    """BatchNorm over every node of the attention's global scope (module docstring)."""

    def __init__(self, dim: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.register_buffer("running_mean", torch.zeros(dim))
        self.register_buffer("running_var", torch.ones(dim))

    def forward(self, x: torch.Tensor, attention=None) -> torch.Tensor:
        if not self.training:
            mean, var = self.running_mean.float(), self.running_var.float()
        else:
            mean, var = self._statistics(x, attention)
        y = (x.float() - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias
        return y.to(x.dtype)

    def _statistics(self, x: torch.Tensor, attention) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, biased variance) [d] fp32 over the scope's nodes; updates the running ones."""
        scope = scope_of(attention)
        x_md = scope.select(x).double()
        count = x_md.new_tensor([x_md.shape[0]])
        sums = scope.sum(torch.cat([x_md.sum(0), (x_md * x_md).sum(0), count]))  # one all-reduce
        d = x.shape[1]
        n = sums[-1].clamp_min(1.0)
        mean = sums[:d] / n
        var = (sums[d : 2 * d] / n - mean * mean).clamp_min(0.0)
        if torch._C._current_graph_task_id() == -1:  # not a checkpointed block's recompute in backward
            with torch.no_grad():
                unbiased = var * (n / (n - 1).clamp_min(1.0))
                self.running_mean.lerp_(mean.to(self.running_mean.dtype), self.momentum)
                self.running_var.lerp_(unbiased.to(self.running_var.dtype), self.momentum)
        return mean.float(), var.float()


def make_norm(kind: str, dim: int) -> nn.Module:
    """The ``model.norm_type`` module for rows of width ``dim``."""
    return BatchNorm(dim) if kind == "batch" else LayerNorm(dim)
