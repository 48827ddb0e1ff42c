"""Runs a function on p local ranks (spawned processes) and returns rank 0's result.

Used by the profiler and the validation sweep: one spawn per rank count, many measurements inside.
The ranks talk over gloo by default; with ``comm="nccl"`` rank r uses GPU r (NCCL needs one
device per rank), so p must not exceed the GPUs present.
Each rank gets ``threads`` torch (and numba) threads; rank 0's result travels back through
``torch.save`` / ``torch.load(weights_only=True)``, so it must be made of numbers, strings, tensors,
lists, tuples and dicts.
Every rank keeps its freed memory in glibc's heap (``host_memory.keep_heap``): a measured call's
time is then its compute, not the kernel zeroing the pages of tensors mapped anew (32 MiB and more).
"""

from __future__ import annotations

import os
import tempfile

import torch.multiprocessing as mp

from dsgraph.comm.ports import free_port


def default_threads(p: int) -> int:
    """Threads per rank when p ranks share this machine's cores."""
    return max(1, (os.cpu_count() or 1) // p)


COMMS = ("gloo", "nccl")


def _entry(rank, p, port, threads, out_path, fn, args, comm="gloo"):
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(p), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if comm == "nccl" else "cpu")  # what deepspeed.comm runs on
    import torch
    import torch.distributed as dist

    from dsgraph.runtime.host_memory import keep_heap

    keep_heap()
    torch.set_num_threads(threads)
    if comm == "nccl":
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=p, device_id=torch.device("cuda", rank))
    else:
        dist.init_process_group("gloo", rank=rank, world_size=p)
    try:
        result = fn(rank, p, *args)
        if rank == 0:
            torch.save(result, out_path)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def check_comm(comm: str, p: int) -> None:
    """ValueError for an unknown backend, or NCCL with more ranks than GPUs."""
    if comm not in COMMS:
        raise ValueError(f"run_ranks: comm must be one of {', '.join(COMMS)}, got '{comm}'")
    if comm == "nccl":
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if p > gpus:
            raise ValueError(f"run_ranks: {p} NCCL ranks need {p} GPUs (one each), this machine has {gpus}")


def run_ranks(fn, p: int, *args, threads: int | None = None, comm: str = "gloo"):
    """Calls ``fn(rank, p, *args)`` on p spawned ranks (torch.distributed initialised on ``comm``:
    gloo, or nccl with rank r on GPU r) and returns what rank 0 returned. An exception on any rank
    is raised here."""
    check_comm(comm, p)
    threads = threads or default_threads(p)
    with tempfile.TemporaryDirectory(prefix="dsgraph-agp-") as tmp:
        out_path = os.path.join(tmp, "result.pt")
        mp.start_processes(
            _entry, args=(p, free_port(), threads, out_path, fn, args, comm), nprocs=p, start_method="spawn"
        )
        import torch

        return torch.load(out_path, weights_only=True)
