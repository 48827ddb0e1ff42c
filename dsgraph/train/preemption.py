"""Preemption: a signal (SLURM's SIGTERM, or the ``--signal`` it sends ahead of the time limit)
turns into a checkpoint and a resumable exit instead of lost work.

The handler only sets a flag, so the rank finishes the step it is in. At every epoch end the ranks
agree (a one-element all-reduce of the flag: one rank signalled is enough), and at the first epoch
end where the ranks can checkpoint (the mode's ``can_checkpoint``: every epoch, except in isolated
training with super-epoch sync, whose ranks agree on one model only at super-epoch boundaries)
every rank writes the checkpoint and
the job exits with ``EXIT_PREEMPTED``. Restart it with ``--resume`` (at any world size).
"""

from __future__ import annotations

import signal

import torch

EXIT_PREEMPTED = 4
SIGNALS = ("SIGTERM", "SIGUSR1", "SIGUSR2", "SIGINT", "SIGHUP")


class Preempted(Exception):
    """Raised on every rank after the preemption checkpoint is written; the entry point exits with
    ``EXIT_PREEMPTED``."""

    def __init__(self, epoch: int, signal_name: str, directory: str, written: bool = True):
        """``written``: False when the disk refused the checkpoint (``directory`` is then the
        checkpoint folder whose newest intact checkpoint --resume loads)."""
        self.epoch, self.signal_name, self.directory = epoch, signal_name, directory
        saved = (
            f"checkpoint of epoch {epoch} written to {directory}"
            if written
            else f"the checkpoint of epoch {epoch} could not be written; --resume loads the newest intact one in "
            f"{directory}"
        )
        super().__init__(f"preempted ({signal_name}): {saved}; exit code {EXIT_PREEMPTED}, restart with --resume")


class Preemption:
    """Installs handlers for ``signal_names`` (``install``/``uninstall``); ``agreed()`` is the
    collective that tells every rank whether any rank received one."""

    def __init__(self, signal_names: list[str]):
        self.signal_names = list(signal_names)
        self.received: str | None = None
        self._previous: dict[int, object] = {}

    def install(self) -> Preemption:
        for name in self.signal_names:
            number = getattr(signal, name)
            try:
                self._previous[number] = signal.signal(number, self._handle)
            except ValueError:  # not the main thread (an embedding application's worker): leave the signal alone
                pass
        return self

    def uninstall(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def _handle(self, number, frame) -> None:
        self.received = self.received or signal.Signals(number).name

    def agreed(self, device: torch.device, world_size: int) -> bool:
        """Collective on the default group (every rank calls it at the same epoch end): True on every
        rank when any rank has received a preemption signal."""
        if not self.signal_names:
            return False
        if world_size == 1:
            return self.received is not None
        import deepspeed.comm as dist

        flag = torch.tensor([0.0 if self.received is None else 1.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() and self.received is None:
            self.received = "another rank's signal"
        return bool(flag.item())
