#!/usr/bin/env bash
# Sets up ./.venv and runs the fast lane of the test suite: every in-process test plus one multi-rank
# test per strategy and mode (-m "not slow or smoke"). --all runs every test (CI does). Other
# arguments go to pytest; a -m of their own replaces the lane's.
set -euo pipefail
cd "$(dirname "$0")/.."
lane=(-m "not slow or smoke")
args=()
for arg in "$@"; do
  if [ "$arg" = "--all" ]; then lane=(); else args+=("$arg"); fi
done
bash tools/setup_venv.sh
exec .venv/bin/python -m pytest -q --durations=25 "${lane[@]}" "${args[@]}"
