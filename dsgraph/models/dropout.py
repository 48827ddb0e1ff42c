"""Dropout whose mask is a pure function of (seed, step, layer, site, global node id, feature).

Graph-parallel ranks each hold a slice of the nodes; drawing masks from a per-rank RNG stream would
make results depend on the number of ranks. Here every mask element comes from a counter-based
hash, so 1, 2 or 4 ranks drop exactly the same elements.
"""

from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF


def _mix32(x):
    """A 32-bit integer hash (xor-shift / multiply rounds); works on Python ints and int64 tensors.
    The multipliers are below 2^31 so products of 32-bit values never overflow int64."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x46C8A68B) & _M32
    return x ^ (x >> 16)


def hash_uniform(key: int, node_ids: torch.Tensor, num_features: int) -> torch.Tensor:
    """Uniform [0, 1) values of shape [len(node_ids), num_features], one per (key, node, feature)."""
    per_node = _mix32(node_ids.long()[:, None] ^ key)  # [n, 1]
    feats = torch.arange(num_features, device=node_ids.device)[None, :]
    return _mix32(per_node ^ _mix32(feats + 0x9E3779B)).to(torch.float32) * (1.0 / 2**32)


def dropout_key(seed: int, step: int, layer: int, site: int) -> int:
    key = _mix32(seed & _M32)
    for part in (step, layer, site):
        key = _mix32(key ^ (part & _M32))
    return key


class NodeDropout(torch.nn.Module):
    """Inverted dropout on node rows [n, F]; ``node_ids`` are the rows' global ids."""

    def __init__(self, p: float, site: int):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p, self.site = p, site

    def forward(self, x: torch.Tensor, node_ids: torch.Tensor, seed: int, step: int, layer: int) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = hash_uniform(dropout_key(seed, step, layer, self.site), node_ids, x.shape[1]) >= self.p
        return x * keep.to(x.dtype) * (1.0 / (1.0 - self.p))
