"""Which live processes use a file: the evidence that a leftover file belongs to nobody.

A process uses a file while it has it open (``/proc/PID/fd``) or mapped (``/proc/PID/maps``); a
mapping outlives the descriptor, so both are read. Linux only (``/proc``).

Reading another process's entries needs the right to inspect it: this user's own ordinary
processes (and, for root, everyone's), but not other users' processes, nor non-dumpable ones
(setuid programs, some init processes) even for their owner. ``scan`` skips those and counts them;
callers decide whether such a process could matter (``dsgraph.runtime.shm`` explains why, for its
buffers, it cannot).
"""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass
class Usage:
    """``users[path]``: pids of the processes that hold ``path`` open or map it; ``uninspected``:
    pids whose entries could not be read."""

    users: dict[str, set[int]]
    uninspected: list[int]

    def in_use(self, path: str) -> bool:
        return bool(self.users.get(os.path.abspath(path)))


def _open_paths(pid: str) -> set[str]:
    """Paths the process holds open; raises PermissionError when it cannot be inspected."""
    paths = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            paths.add(os.readlink(os.path.join(fd_dir, fd)))
        except FileNotFoundError:  # closed meanwhile
            pass
    return paths


def _mapped_paths(pid: str) -> set[str]:
    """Paths the process has mapped (the text after the inode column of /proc/PID/maps)."""
    paths = set()
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split(None, 5)
            if len(fields) == 6:
                path = fields[5].rstrip("\n")
                paths.add(path.removesuffix(" (deleted)"))
    return paths


def scan(paths: list[str]) -> Usage:
    """Reads every live process's open files and mappings and reports who uses each of ``paths``."""
    wanted = {os.path.abspath(p) for p in paths}
    usage = Usage(users={p: set() for p in wanted}, uninspected=[])
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            used = _open_paths(pid) | _mapped_paths(pid)
        except (FileNotFoundError, ProcessLookupError):  # ended while we looked
            continue
        except PermissionError:
            usage.uninspected.append(int(pid))
            continue
        for path in used & wanted:
            usage.users[path].add(int(pid))
    return usage
