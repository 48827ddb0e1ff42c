#!/usr/bin/env bash
# Creates ./.venv with everything dsgraph needs (idempotent; safe to run again).
# torch is installed first and pinned: an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q "torch==${DSGRAPH_TORCH_VERSION:-2.13.0}"
.venv/bin/pip install -q mpich  # an MPI library (and mpiexec) for mpi4py
.venv/bin/pip install -q -e ".[dev]"
