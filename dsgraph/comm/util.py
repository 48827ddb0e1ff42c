"""Small helpers of the comm package: the tensor communication module and byte counts."""

from __future__ import annotations

import torch


def dist():
    """deepspeed.comm (its comms logger sees what dsgraph sends), imported when first needed."""
    import deepspeed.comm as ds_dist

    return ds_dist


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def global_rank(pg, r: int) -> int:
    """The global rank of rank ``r`` of ``pg``'s group (point-to-point calls take global ranks)."""
    if pg.group is None:
        return r
    import torch.distributed as tdist

    return tdist.get_global_rank(pg.group, r)
