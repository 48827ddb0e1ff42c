#!/usr/bin/env bash
# The GPU checks of the sparse attention kernels, for a machine with a CUDA GPU (under 5 minutes):
#   1. the environment (GPU, torch, CuPy);
#   2. the GPU tests: every CUDA kernel against the reference, outputs and all input gradients,
#      fp32 and bf16, every head dim, determinism, streams, memory (tests/ops/test_cuda_gpu.py);
#   3. the kernel benchmark on R-MAT graphs, fp32 and bf16.
# Needs python with torch (CUDA), cupy, numba, numpy and pytest; dsgraph is used from this checkout.
# Usage: bash tools/gpu_check.sh [LOG_DIR]   (default: $OUT if set, else ./gpu_check_logs)
# Exit status: 0 when the GPU tests pass and the benchmark ran, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG_DIR=${1:-${OUT:-gpu_check_logs}}
mkdir -p "$LOG_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0

echo "== environment"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  "$PY" -c "import torch, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cupy', cupy.__version__, 'gpu', torch.cuda.is_available())"
} 2>&1 | tee "$LOG_DIR/environment.txt"

echo "== GPU tests"
timeout 200 "$PY" -m pytest -q -m gpu -p no:cacheprovider -rs tests/ops/test_cuda_gpu.py 2>&1 | tee "$LOG_DIR/gpu_tests.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
grep -q " passed" "$LOG_DIR/gpu_tests.txt" && ! grep -q "skipped" "$LOG_DIR/gpu_tests.txt" || status=1  # skips count as failure here

echo "== kernel benchmark"
timeout 150 "$PY" tools/bench_kernels.py --device cuda --graph rmat:17 --graph rmat:20 --heads 8 --dim 16 \
  --dtype fp32 --dtype bf16 --repeats 5 2>&1 | tee "$LOG_DIR/bench_kernels.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
# the acceptance graph: R-MAT with >= 50M edges (rmat:22 at edge factor 16 keeps ~60M after dedup), bf16
timeout 200 "$PY" tools/bench_kernels.py --device cuda --graph rmat:22:16 --heads 8 --dim 16 --dtype bf16 \
  --backends reference,cuda --repeats 3 2>&1 | tee "$LOG_DIR/bench_kernels_50M.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "== gpu_check: $([ $status -eq 0 ] && echo PASSED || echo FAILED) (logs in $LOG_DIR)"
exit $status
