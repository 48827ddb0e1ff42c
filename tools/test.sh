#!/usr/bin/env bash
# Sets up ./.venv and runs the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_venv.sh
exec .venv/bin/python -m pytest -q "$@"
