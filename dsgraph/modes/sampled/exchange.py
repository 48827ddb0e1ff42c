"""All-to-all of variable-length row groups among the ranks, over a gloo group of its own.

A rank reading from a partition store asks the owners of the rows it needs and answers the others'
requests from its own part (``remote.py``). Each ``Exchange`` owns its process group, so the
prefetch thread (training batches) and the main thread (evaluation batches) never interleave their
collectives with each other or with the training loop's. Every rank must call ``swap`` the same
number of times in the same order; a rank with nothing to send still joins with empty groups.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import torch


class Exchange:
    """``swap`` on ``world_size`` ranks (one rank: a local copy, no collective).

    Make one per thread that exchanges, on every rank in the same order (``new_group`` is collective).
    """

    def __init__(self, rank: int, world_size: int, timeout_s: float = 300.0):
        self.rank, self.world_size = rank, world_size
        self.group = None
        self.calls = 0
        self.bytes_sent = 0
        if world_size > 1:
            import torch.distributed as dist

            self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))

    def swap(self, rows: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sends ``rows[...]`` grouped by destination (``counts[r]`` rows for rank r, in rank order);
        returns (the rows received, grouped by source rank in rank order, and how many from each)."""
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != (self.world_size,) or int(counts.sum()) != rows.shape[0]:
            raise ValueError(f"counts {counts.tolist()} do not split {rows.shape[0]} rows over {self.world_size} ranks")
        self.calls += 1
        if self.group is None:
            return np.array(rows), counts
        import torch.distributed as dist

        recv_counts = torch.empty(self.world_size, dtype=torch.int64)
        dist.all_to_all_single(recv_counts, torch.from_numpy(counts), group=self.group)
        send = torch.from_numpy(np.ascontiguousarray(rows))
        recv = torch.empty((int(recv_counts.sum()), *rows.shape[1:]), dtype=send.dtype)
        dist.all_to_all_single(recv, send, recv_counts.tolist(), counts.tolist(), group=self.group)
        self.bytes_sent += send.numel() * send.element_size()
        return recv.numpy(), recv_counts.numpy()


def grouped(owner: np.ndarray, world_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(order that groups items by owner rank, stably; items per rank)."""
    return np.argsort(owner, kind="stable"), np.bincount(owner, minlength=world_size).astype(np.int64)
