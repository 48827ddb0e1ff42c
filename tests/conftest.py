"""Test-wide settings: runs started by the tests write their default outputs (metrics.jsonl under
runs/<run_name>/) into a temporary folder, never into the checkout; a test that starts processes
must be marked ``slow`` (tests/process_guard.py); ``pytester`` runs pytest on planted test files."""

import os
import tempfile

os.environ.setdefault("DSGRAPH_RUNS_DIR", tempfile.mkdtemp(prefix="dsgraph-test-runs-"))

pytest_plugins = ("tests.process_guard", "pytester")


def pytest_sessionstart(session):
    """Imports that start a process the first time, done before any test runs so that the marker
    guard does not charge them to the first test that happens to import them: matplotlib builds its
    font cache on a fresh machine by running ``fc-list``, and ``torch.cuda`` loads
    ``cuda.pathfinder`` (installed with the dev extra's cuda-bindings), which runs ``ldconfig -p``."""
    import torch.cuda  # noqa: F401

    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass
