"""Test-wide settings: runs started by the tests write their default outputs (metrics.jsonl under
runs/<run_name>/) into a temporary folder, never into the checkout."""

import os
import tempfile

os.environ.setdefault("DSGRAPH_RUNS_DIR", tempfile.mkdtemp(prefix="dsgraph-test-runs-"))
