"""Dropout whose mask is a pure function of (seed, step, layer, site, global node id, feature).

Graph-parallel ranks each hold a slice of the nodes; drawing masks from a per-rank RNG stream would
make results depend on the number of ranks. Here every mask element comes from a counter-based
hash, so 1, 2 or 4 ranks drop exactly the same elements.

Memory: on the CPU the mask is hashed in blocks of rows (the int64 hash temporaries stay a few MB
instead of several N x F x 8 bytes); on a GPU in one block when free memory allows (kernel launches,
not bytes, are what a GPU pays for there). Backward keeps the mask as a bool tensor (1 byte per
element, not a float mask of the input's size).
"""

from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF
SPARSE_INPUT_DENSITY = 0.25  # below this share of nonzeros, only nonzero entries are hashed
HASH_BLOCK = 1 << 18  # elements hashed at a time on the CPU (int64 temporaries of 2 MB each)


def _mix32(x):
    """A 32-bit integer hash (xor-shift / multiply rounds); works on Python ints and int64 tensors.
    The multipliers are below 2^31 so products of 32-bit values never overflow int64."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x46C8A68B) & _M32
    return x ^ (x >> 16)


def hash_bits(key: int, node_ids: torch.Tensor, feature_ids: torch.Tensor) -> torch.Tensor:
    """32-bit hash values (int64) of (key, node, feature), broadcast over node_ids and feature_ids."""
    return _mix32(_mix32(node_ids.long() ^ key) ^ _mix32(feature_ids.long() + 0x9E3779B))


def keep_mask(key: int, threshold: int, node_ids: torch.Tensor, width: int) -> torch.Tensor:
    """bool [n, width]: element (i, f) is kept when hash(key, node_ids[i], f) >= threshold.

    The per-node and per-feature halves of the hash are computed once, on [n] and [width]; only the
    final mix runs on [n, width], in place, in blocks of ``_hash_rows`` rows: about a dozen elementwise
    kernels per block. On a GPU one block is the whole tensor whenever its temporaries fit in a
    quarter of the free memory, so a mask costs a few tens of kernel launches, not ~35 per 2^18
    elements. Same bits as ``hash_bits(key, node_ids[:, None], arange(width)[None, :])``."""
    keep = torch.empty((node_ids.numel(), width), dtype=torch.bool, device=node_ids.device)
    if keep.numel() == 0:
        return keep
    row_half = _mix32(node_ids.long() ^ key)[:, None]
    col_half = _mix32(torch.arange(width, device=node_ids.device) + 0x9E3779B)[None, :]
    rows = _hash_rows(node_ids.device, node_ids.numel(), width)
    for start in range(0, node_ids.numel(), rows):
        h = row_half[start : start + rows] ^ col_half
        torch.ge(_mix32_(h), threshold, out=keep[start : start + rows])
    return keep


def _mix32_(x: torch.Tensor) -> torch.Tensor:
    """``_mix32`` in place on an int64 tensor (one temporary of x's size at a time)."""
    x.bitwise_xor_(x >> 16).mul_(0x7FEB352D).bitwise_and_(_M32)
    x.bitwise_xor_(x >> 15).mul_(0x46C8A68B).bitwise_and_(_M32)
    return x.bitwise_xor_(x >> 16)


HASH_TEMP_BYTES = 16  # int64 bytes per element in flight in keep_mask: the block and one shifted copy


def _hash_rows(device: torch.device, n: int, width: int) -> int:
    """Rows of a mask hashed at a time: HASH_BLOCK elements (cache-sized) on the CPU; on a GPU as many
    as a quarter of its free memory holds (the whole mask for any usual activation)."""
    elements = max(HASH_BLOCK, _free_device_bytes(device) // (4 * HASH_TEMP_BYTES))
    return max(1, min(n, elements // max(width, 1)))


def _free_device_bytes(device: torch.device) -> int:
    """Free memory of a CUDA device; 0 elsewhere (the CPU keeps small blocks)."""
    return torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else 0


class _MaskedScale(torch.autograd.Function):
    """x * keep * scale with a bool ``keep`` (broadcast over x); backward keeps only the bool mask."""

    @staticmethod
    def forward(ctx, x, keep, scale):
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return (x * keep).mul_(scale)

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return (grad * keep).mul_(ctx.scale), None, None


def _sparse(x: torch.Tensor) -> bool:
    """Whether under ``SPARSE_INPUT_DENSITY`` of ``x`` is nonzero (counted: ``nonzero()`` on dense rows
    costs tens of ns a value, 75 ms a step at rmat:16's 4M input values)."""
    return int(torch.count_nonzero(x)) < SPARSE_INPUT_DENSITY * x.numel()


def dropout_key(seed: int, step: int, layer: int, site: int) -> int:
    key = _mix32(seed & _M32)
    for part in (step, layer, site):
        key = _mix32(key ^ (part & _M32))
    return key


class NodeDropout(torch.nn.Module):
    """Inverted dropout on node rows [n, F]; ``node_ids`` are the rows' global ids.

    Element (i, f) is kept when hash(key, node_ids[i], f) >= p * 2^32. For [n, H, D] inputs the mask
    is drawn per (node, head) and covers the head's D features. Zero entries stay zero
    whatever the mask, so for sparse inputs (bag-of-words features) only the nonzeros are hashed:
    the same result at a fraction of the cost.
    """

    def __init__(self, p: float, site: int):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p, self.site = p, site

    def forward(self, x: torch.Tensor, node_ids: torch.Tensor, seed: int, step: int, layer: int) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        key = dropout_key(seed, step, layer, self.site)
        threshold = int(self.p * 2**32)
        scale = 1.0 / (1.0 - self.p)
        if not x.requires_grad and x.dim() == 2 and _sparse(x):
            rows, cols = x.nonzero(as_tuple=True)
            keep = hash_bits(key, node_ids[rows], cols) >= threshold
            out = torch.zeros_like(x)
            out[rows, cols] = x[rows, cols] * keep.to(x.dtype) * scale
            return out
        keep = keep_mask(key, threshold, node_ids, x.shape[1])
        if x.dim() == 3:
            keep = keep[:, :, None]
        return _MaskedScale.apply(x, keep, scale)
