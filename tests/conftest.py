"""Test-wide settings: runs started by the tests write their default outputs (metrics.jsonl under
runs/<run_name>/) into a temporary folder, never into the checkout; a test that starts processes
must be marked ``slow`` (tests/process_guard.py); ``pytester`` runs pytest on planted test files."""

import os
import tempfile

os.environ.setdefault("DSGRAPH_RUNS_DIR", tempfile.mkdtemp(prefix="dsgraph-test-runs-"))

pytest_plugins = ("tests.process_guard", "pytester")


def pytest_sessionstart(session):
    """matplotlib builds its font cache on its first import on a machine by running ``fc-list``: build
    it before any test runs, so that the first plotting test of a fresh machine starts no process
    (the marker guard would fail it)."""
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass
