"""Run a command and watch the resident memory of its processes: per-process peak RSS (the kernel's
VmHWM, read from /proc every INTERVAL seconds while the process lives) and an optional cap that
kills the whole process group as soon as one watched process's RSS (VmRSS) is above it.

Used by tools/reports/memory_report.py (per-rank peak RSS of a training run) and tools/benchmarks/peer_memory.py (the
largest graph that trains under one cap). Linux only (/proc).

What is watched: the command's descendants whose command line contains ``match`` (for the training
command, the rank processes running launch/train.py, not the deepspeed launcher around them), or
the command's own process when ``match`` is empty. VmHWM is the kernel's own high-water mark, so a
short spike between two samples still counts, as long as the process is alive at some sample after
it (the last sample before it exits is what is reported). The cap is enforced on sampled VmRSS:
a process can overshoot it by what it allocates in one interval before it is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field

INTERVAL = 0.1


@dataclass
class Watched:
    returncode: int | None  # None: killed (cap or timeout)
    seconds: float
    over_cap: bool = False
    timed_out: bool = False
    peak_mb: dict[int, float] = field(default_factory=dict)  # pid -> last VmHWM seen, MB
    tags: dict[int, str] = field(default_factory=dict)  # pid -> its command line

    def peaks(self) -> list[float]:
        return [self.peak_mb[pid] for pid in sorted(self.peak_mb)]


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, []).append(int(name))
    return tree


def _descendants(root: int) -> list[int]:
    tree, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(tree.get(pid, []))
    return out


def _status_mb(pid: int) -> tuple[float, float] | None:
    """(VmRSS, VmHWM) of a live process in MB, or None once it has gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024
    except (OSError, KeyError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def kill_group(pid: int) -> None:
    """SIGKILL to a process group that may have exited already."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_watched(
    cmd: list[str],
    *,
    log_path: str,
    cap_mb: float | None = None,
    timeout: float = 3600.0,
    match: str = "",
    env: dict | None = None,
    cwd: str | None = None,
) -> Watched:
    """Runs ``cmd`` in its own process group (output to ``log_path``), sampling its watched
    processes' memory; kills the group above ``cap_mb`` (``over_cap``) or after ``timeout`` s."""
    began = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        result = Watched(returncode=None, seconds=0.0)
        while proc.poll() is None:
            for pid in _descendants(proc.pid) if match else [proc.pid]:
                if match and pid not in result.tags:
                    line = _cmdline(pid)
                    if match not in line or "deepspeed.launcher" in line:
                        continue
                    result.tags[pid] = line
                status = _status_mb(pid)
                if status is None:
                    continue
                result.peak_mb[pid] = status[1]
                if cap_mb is not None and status[0] > cap_mb:
                    result.over_cap = True
            if result.over_cap or time.monotonic() - began > timeout:
                result.timed_out = not result.over_cap
                kill_group(proc.pid)
                proc.wait()
                break
            time.sleep(INTERVAL)
        kill_group(proc.pid)  # leftovers of the group (a rank the launcher did not reap)
    result.returncode = None if result.over_cap or result.timed_out else proc.returncode
    result.seconds = time.monotonic() - began
    return result
