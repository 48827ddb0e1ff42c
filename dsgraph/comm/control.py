"""The control plane: small Python objects (partition metadata, halo id lists, decisions) between ranks.

Tensors move on the data plane (deepspeed.comm); these messages are few, small and irregular, so they
travel as pickled objects. One interface, two implementations, chosen once at start-up:

- ``MPIControlPlane``: mpi4py's ``COMM_WORLD``, when an MPI launcher started the job (``mpirun``,
  ``mpiexec``, ``deepspeed --launcher mpich|openmpi``) and MPI's world equals torch's world.
- ``TorchControlPlane``: torch.distributed object collectives on the default group (otherwise, for
  example under ``deepspeed --num_accelerators``, where every process's MPI world has size 1).

Every call is collective: all ranks call it in the same order.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

# Set by MPI launchers in every process they start (MPICH/Hydra, Open MPI, PMIx); their absence
# means no MPI launcher, and mpi4py is then not imported at all.
MPI_LAUNCHER_ENV = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


class ControlPlane(ABC):
    """The interface: ``name``, ``rank``, ``world_size`` and two collectives on picklable objects."""

    name: str
    rank: int = 0
    world_size: int = 1

    @abstractmethod
    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order: [obj of rank 0, ..., obj of rank P-1]."""

    @abstractmethod
    def bcast(self, obj: Any, root: int = 0) -> Any:
        """``root``'s ``obj`` on every rank (other ranks' ``obj`` is ignored)."""


class TorchControlPlane(ControlPlane):
    """torch.distributed ``all_gather_object`` / ``broadcast_object_list`` on the default group
    (a one-rank world when torch.distributed is not initialised)."""

    name = "torch"

    def __init__(self):
        import torch.distributed as dist

        self._dist = dist if dist.is_available() and dist.is_initialized() else None
        if self._dist is not None:
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()

    def allgather(self, obj: Any) -> list[Any]:
        if self.world_size == 1:
            return [obj]
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, obj)
        return out

    def bcast(self, obj: Any, root: int = 0) -> Any:
        if self.world_size == 1:
            return obj
        box = [obj if self.rank == root else None]
        self._dist.broadcast_object_list(box, src=root)
        return box[0]


class MPIControlPlane(ControlPlane):
    """mpi4py ``COMM_WORLD`` (pickled-object ``allgather`` / ``bcast``)."""

    name = "mpi"

    def __init__(self, comm=None):
        if comm is None:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
        self._comm = comm
        self.rank, self.world_size = comm.Get_rank(), comm.Get_size()

    def allgather(self, obj: Any) -> list[Any]:
        return self._comm.allgather(obj)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self._comm.bcast(obj, root=root)


def launched_by_mpi(environ=os.environ) -> bool:
    return any(key in environ for key in MPI_LAUNCHER_ENV)


def choose_control_plane(
    torch_rank: int, torch_world: int, mpi_rank: int | None, mpi_world: int | None
) -> tuple[str, str]:
    """Pure choice: ("mpi" | "torch", reason). ``mpi_*`` are None when no MPI launcher started the job."""
    if mpi_world is None:
        return "torch", "no MPI launcher"
    if torch_world == 1:
        return "torch", "a one-rank job"
    if (mpi_rank, mpi_world) != (torch_rank, torch_world):
        return "torch", f"MPI rank/world {mpi_rank}/{mpi_world} differ from torch's {torch_rank}/{torch_world}"
    return "mpi", f"MPI launcher, MPI world = torch world = {torch_world}"


def make_control_plane(log: Callable[[str], None] | None = None) -> ControlPlane:
    """The control plane for this job (call after torch.distributed is initialised, on every rank).
    ``log`` receives one line naming the choice and why (pass it on rank 0 only)."""
    plane = TorchControlPlane()
    mpi_rank = mpi_world = None
    if launched_by_mpi():
        from mpi4py import MPI

        mpi_rank, mpi_world = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    choice, reason = choose_control_plane(plane.rank, plane.world_size, mpi_rank, mpi_world)
    if choice == "mpi":
        plane = MPIControlPlane()
    if log is not None:
        log(f"control plane: {plane.name} ({reason})")
    return plane
