"""The pure-torch sparse attention: the oracle every fused backend is tested against.

It is also the "unfused" baseline: it gathers q_i and k_j for every edge and materialises E x H
scores and E x H x D messages, which is what runs large graphs out of memory.
"""

from __future__ import annotations

import torch

from dsgraph.ops.backend import Backend


def sparse_attention_reference(
    rowptr: torch.Tensor, col: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> torch.Tensor:
    """y[i] = sum_{j in col[rowptr[i]:rowptr[i+1]]} softmax_j(scale * <q_i, k_j>) v_j, per head.

    q: [N_dst, H, D]; k, v: [N_src, H, D]; returns y [N_dst, H, D] in q's dtype (fp32 math for
    bf16 inputs). Rows with no edges give zeros. Differentiable in q, k and v.
    """
    n_dst, heads, _ = q.shape
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    dst = torch.repeat_interleave(torch.arange(n_dst, device=q.device), rowptr[1:] - rowptr[:-1])
    src = col.long()
    scores_EH = (q[dst].to(acc) * k[src].to(acc)).sum(-1) * scale
    row_max_NH = torch.full((n_dst, heads), float("-inf"), dtype=acc, device=q.device)
    row_max_NH = row_max_NH.scatter_reduce(0, dst[:, None].expand_as(scores_EH), scores_EH.detach(), "amax")
    weights_EH = torch.exp(scores_EH - row_max_NH[dst])
    denom_NH = torch.zeros((n_dst, heads), dtype=acc, device=q.device).index_add(0, dst, weights_EH)
    probs_EH = weights_EH / denom_NH[dst]
    y = torch.zeros(q.shape, dtype=acc, device=q.device)
    y = y.index_add(0, dst, probs_EH[:, :, None] * v[src].to(acc))
    return y.to(q.dtype)


class ReferenceBackend(Backend):
    """The oracle as a backend: any device, any float dtype, torch's own autograd."""

    name = "reference"
    priority = 0
    device_type = None

    def unsupported(self, q, tensors) -> str:
        first = q.device
        wrong = next((name for name, t in tensors.items() if t.device != first), None)
        return f"all inputs must be on one device; '{wrong}' is on {tensors[wrong].device}, q on {first}" if wrong else ""

    def attention(self, rowptr, col, q, k, v, scale: float) -> torch.Tensor:
        return sparse_attention_reference(rowptr, col, q, k, v, scale)
