"""The marker guard (a pytest plugin, loaded by tests/conftest.py): a test that starts a process
(spawned or forked ranks, ``subprocess``, the deepspeed launcher, the dsgraph CLI, ``os.system``)
must carry ``@pytest.mark.slow``, so that ``bash tools/test.sh`` (``-m "not slow or smoke"``) stays
the fast lane. While a test without the marker runs (its setup, call and teardown), every process
start raises ``UnmarkedProcessStart``; a test that catches that error still fails. Threads (torch,
numba) are not processes and are left alone. Processes started by marked tests are not guarded.

Process starts are seen through Python's audit events (``subprocess.Popen``, ``os.fork``,
``os.posix_spawn``, ``os.system`` ...) and ``multiprocessing``'s ``Process.start``, which
``torch.multiprocessing`` uses too (its spawn start fork-execs without an audit event)."""

from __future__ import annotations

import multiprocessing.process
import sys

import pytest

MARKER = "slow"
AUDIT_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system"})


class UnmarkedProcessStart(RuntimeError):
    """A test without ``@pytest.mark.slow`` started a process."""


class _Guard:
    """The running test's node id when it lacks the marker (None: process starts allowed) and the
    process starts it attempted (so that a test that swallows the error still fails)."""

    def __init__(self):
        self.nodeid: str | None = None
        self.attempts: list[str] = []
        self.installed = False

    def check(self, what: str) -> None:
        if self.nodeid is None:
            return
        message = (
            f"{self.nodeid} starts a process ({what}) but is not marked @pytest.mark.{MARKER}: a test that starts "
            "processes carries the marker (add @pytest.mark.smoke too if it is the fast lane's one multi-rank test "
            "of its strategy or mode); see tests/process_guard.py"
        )
        self.attempts.append(message)
        raise UnmarkedProcessStart(message)


GUARD = _Guard()
_process_start = multiprocessing.process.BaseProcess.start


def _audit(event: str, args: tuple) -> None:
    if event in AUDIT_EVENTS:
        GUARD.check(f"{event} {args[:2]!r}"[:300])


def _guarded_start(self) -> None:
    GUARD.check(f"multiprocessing {type(self).__name__}.start")
    _process_start(self)


def pytest_configure(config) -> None:
    if not GUARD.installed:  # audit hooks cannot be removed: install once per interpreter
        sys.addaudithook(_audit)
        multiprocessing.process.BaseProcess.start = _guarded_start
        GUARD.installed = True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    outer = GUARD.nodeid, GUARD.attempts  # a nested pytest run (pytester) restores the outer test's state
    GUARD.nodeid, GUARD.attempts = (None if item.get_closest_marker(MARKER) else item.nodeid), []
    try:
        return (yield)
    finally:
        GUARD.nodeid, GUARD.attempts = outer


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if GUARD.attempts and report.passed:  # the test caught UnmarkedProcessStart and carried on
        report.outcome, report.longrepr = "failed", "\n".join(GUARD.attempts)
    GUARD.attempts = []
    return report
