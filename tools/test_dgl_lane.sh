#!/usr/bin/env bash
# The DGL test lane: builds ./.venv-dgl (torch 2.2.1, dgl 2.1.0, numpy<2) and runs the DGL interop
# tests there. DGL's last wheels on the package index carry native libraries only for torch
# 2.0.0-2.2.1 (CPU builds), which is why this lane lives in its own environment; torch 2.2.1 is the
# newest torch that dgl 2.1.0 ships graphbolt/sparse libraries for (2.2.2 has none).
# The torch 2.2.1 wheel on the package index is the CUDA build: it and its nvidia-* libraries are
# about 2.5 GB to download; tests run on CPU. Idempotent; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-dgl
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "torch==2.2.1" "numpy<2"
# torchdata is dgl's dependency (graphbolt); 0.7.1 is its last release with datapipes, pinned to a
# different torch, so it comes in without its own dependencies.
"$VENV/bin/pip" install -q --no-deps "torchdata==0.7.1"
# dgl 2.1.0 imports pandas, yaml and pydantic (graphbolt) without declaring them.
"$VENV/bin/pip" install -q "dgl==2.1.0" "torch==2.2.1" "numpy<2" pandas pyyaml pydantic pytest
"$VENV/bin/pip" install -q --no-deps -e .
# --noconftest: the lane lacks the main environment's packages that other tests' conftest files may need.
DSGRAPH_REQUIRE_DGL=1 exec "$VENV/bin/python" -m pytest -q --noconftest -p no:cacheprovider tests/interop/test_dgl.py "$@"
