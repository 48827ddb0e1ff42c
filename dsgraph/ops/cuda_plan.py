"""Load balance for the CUDA kernels: segments (CSR rows or CSC columns) binned by degree.

Pure torch, so it runs (and is tested) on the CPU; the CUDA backend builds one plan per graph and
direction on the GPU and caches it. Bins (see cuda/sparse_attention_common.cuh):
  small  degree <= SMALL_MAX (rows with no edges included): a team of lanes per (segment, head);
  warp   SMALL_MAX < degree <= WARP_MAX: a warp per (segment, head);
  long   degree > WARP_MAX: split into chunks of at most CHUNK_EDGES edges, a block per
         (chunk, head), then the chunks' partial states are merged per (segment, head).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SMALL_MAX = 16
WARP_MAX = 1024
CHUNK_EDGES = 4096


@dataclass(frozen=True)
class SegmentPlan:
    """Index lists of one direction of a graph; every tensor lives on the graph's device.

    small, warp, long: int32 segment ids of each bin. long_chunk_ptr: int32 [n_long+1], the chunks
    of long segment r are long_chunk_ptr[r]:long_chunk_ptr[r+1]. chunk_seg: int32 [n_chunks], the
    segment of each chunk. chunk_begin: int64 [n_chunks], its first edge (it ends after
    chunk_edges edges or at the segment's end).
    """

    small: torch.Tensor
    warp: torch.Tensor
    long: torch.Tensor
    long_chunk_ptr: torch.Tensor
    chunk_seg: torch.Tensor
    chunk_begin: torch.Tensor
    chunk_edges: int

    @property
    def num_chunks(self) -> int:
        return self.chunk_seg.numel()


def build_plan(
    ptr: torch.Tensor, *, small_max: int = SMALL_MAX, warp_max: int = WARP_MAX, chunk_edges: int = CHUNK_EDGES
) -> SegmentPlan:
    """Bins the segments of ptr (int64 [n+1], rowptr or colptr) by degree."""
    if not 0 <= small_max < warp_max or chunk_edges < 1:
        raise ValueError("build_plan: need 0 <= small_max < warp_max and chunk_edges >= 1")
    degree = ptr[1:] - ptr[:-1]
    ids = torch.arange(degree.numel(), device=ptr.device, dtype=torch.int32)
    long = ids[degree > warp_max]
    chunks_per_long = (degree[long.long()] + chunk_edges - 1) // chunk_edges
    long_chunk_ptr = torch.zeros(long.numel() + 1, dtype=torch.int64, device=ptr.device)
    torch.cumsum(chunks_per_long, 0, out=long_chunk_ptr[1:])
    chunk_seg = torch.repeat_interleave(long, chunks_per_long)
    first_chunk = torch.repeat_interleave(long_chunk_ptr[:-1], chunks_per_long)
    chunk_index = torch.arange(chunk_seg.numel(), device=ptr.device) - first_chunk
    return SegmentPlan(
        small=ids[degree <= small_max],
        warp=ids[(degree > small_max) & (degree <= warp_max)],
        long=long,
        long_chunk_ptr=long_chunk_ptr.to(torch.int32),
        chunk_seg=chunk_seg,
        chunk_begin=ptr[chunk_seg.long()] + chunk_index * chunk_edges,
        chunk_edges=chunk_edges,
    )
