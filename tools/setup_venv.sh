#!/usr/bin/env bash
# Creates ./.venv with everything dsgraph needs (idempotent; safe to run again).
# torch is installed first and pinned: an unpinned torch would pull a multi-GB CUDA build. On a
# machine whose nvidia-smi lists GPUs the same pin takes PyPI's CUDA build of torch, and the [cuda]
# extra adds CuPy for the fused CUDA kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q "torch==${DSGRAPH_TORCH_VERSION:-2.13.0}"
.venv/bin/pip install -q mpich  # an MPI library (and mpiexec) for mpi4py
extras=dev
if command -v nvidia-smi >/dev/null 2>&1 && [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -gt 0 ]; then extras=dev,cuda; fi
.venv/bin/pip install -q -e ".[$extras]"
# headless chromium for the TensorBoard browser test (tests/tools/test_tensorboard_profile.py skips without it):
# Debian's package, where apt works (root, or passwordless sudo); nothing is lost where it does not
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_="sudo -n"
  { $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq chromium; } >/dev/null 2>&1 \
    || echo "setup_venv: could not install chromium with apt; the TensorBoard browser test will be skipped" >&2
fi
