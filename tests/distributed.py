"""Runs a test function on P gloo processes (spawned, file store in a temp folder).

``run(fn, world_size, tmp_path, *args)`` calls ``fn(rank, world_size, tmp_path, *args)`` on every
rank after dsgraph's ``init_distributed`` (gloo); an assertion on any rank fails the test.
"""

from __future__ import annotations

import os

import torch.multiprocessing as mp

from dsgraph.comm.ports import free_port


def _entry(rank, world_size, port, tmp_path, fn, args):
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    import deepspeed.comm as dist
    import torch

    from dsgraph.train.trainer import init_distributed

    torch.set_num_threads(1)
    init_distributed(mpi_discovery=False)
    try:
        fn(rank, world_size, tmp_path, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run(fn, world_size: int, tmp_path, *args) -> None:
    mp.start_processes(
        _entry, args=(world_size, free_port(), str(tmp_path), fn, args), nprocs=world_size, start_method="spawn"
    )
