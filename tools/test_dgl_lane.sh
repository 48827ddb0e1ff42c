#!/usr/bin/env bash
# The DGL test lane: builds ./.venv-dgl (torch 2.2.1, dgl 2.1.0, numpy<2) and runs the DGL interop
# tests there. DGL's last wheels on the package index carry native libraries only for torch
# 2.0.0-2.2.1 (CPU builds), which is why this lane lives in its own environment; torch 2.2.1 is the
# newest torch that dgl 2.1.0 ships graphbolt/sparse libraries for (2.2.2 has none).
# The torch 2.2.1 wheel on the package index is the CUDA build: it and its nvidia-* libraries are
# about 2.5 GB to download (5.3 GB installed); CPU-only torch 2.2 wheels are not on the package
# index. Tests run on CPU. From scratch the lane takes about 2 minutes. Idempotent; extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-dgl
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
[ -f "$VENV/.gitignore" ] || echo '*' > "$VENV/.gitignore"  # git ignores the lane's environment
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "torch==2.2.1" "numpy<2"
# dgl 2.1.0's graphbolt imports torchdata.datapipes (gone after torchdata 0.7.1) and pandas, yaml
# and pydantic, which dgl does not declare.
"$VENV/bin/pip" install -q "dgl==2.1.0" "torchdata==0.7.1" "torch==2.2.1" "numpy<2" pandas pyyaml pydantic pytest
# numba: tools/benchmarks/bench_peers.py runs dsgraph's GraphTransformer here with DGL's attention, and the
# model's modules import dsgraph.ops, whose CPU backend is numba.
"$VENV/bin/pip" install -q numba "numpy<2"
# dsgraph itself comes from this checkout (PYTHONPATH), without its dependencies: the interop code
# needs only torch and numpy (and numba, for dsgraph.ops).
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# --noconftest: the lane lacks the main environment's packages that other tests' conftest files may need.
DSGRAPH_REQUIRE_DGL=1 exec "$VENV/bin/python" -m pytest -q --noconftest -p no:cacheprovider tests/interop/test_dgl.py "$@"
