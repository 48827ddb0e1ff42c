#!/usr/bin/env bash
# The GPU acceptance check of dsgraph: ONE command that finishes in under 8 minutes on one H200.
#
#   bash tools/gpu/check.sh --prepare   on the CPU machine (network, ./.venv): packs .gpu_pack/ (git-ignored,
#                                       < 60 MiB): the wheels the GPU machine lacks (DeepSpeed built here,
#                                       its missing requirements for CPython 3.12) and the CPU losses of the
#                                       training runs it compares against (tools/gpu/pack.py, gpu_train_check.py)
#   bash tools/gpu/check.sh [LOG_DIR]   on the GPU machine, .gpu_pack carried along: every check below
#   bash tools/gpu/check.sh --help
#
# The GPU run writes to LOG_DIR ($OUT if set, else ./gpu_check_logs):
#   0. install   .gpu_pack/wheels/*.whl with pip --no-index into /tmp/dsgraph-site, put on PYTHONPATH
#   1. environment   nvidia-smi, torch, CuPy, DeepSpeed, PyG (into gpu_results.json)
#   data (from the start, in the background, on CPU cores): rmat:20 and rmat:22 written once as .npz
#                 for the benchmarks (tools/benchmarks/save_dataset.py)
#   2. at once (correctness, not timed):
#      kernel_tests  tests/ops/test_cuda_gpu.py -m gpu (a skip counts as a failure)
#      training      every one-rank strategy and mode, fp32 and bf16, deepspeed --num_gpus 1, losses
#                    against the CPU's (tools/gpu/train_check.py)                      -> train.json
#   3. one after another (timed, the GPU to itself):
#      bench_kernels         rmat:20 fp32+bf16 (reference, cuda, pyg)                  -> kernels.json
#      bench_kernels_rmat22  rmat:22 bf16 (cuda, pyg; never the reference, ~143 GiB there)  (kernels.json)
#      bench_models_rmat22   Graph Transformer vs PyG TransformerConv, bf16            -> models_rmat22.json
#      profile               dsgraph profile --backend cuda --dtype bfloat16, collectives for p > 1 from
#                            docs/agp/dgx_h100_8gpu_bf16_profile.json                  -> agp_profile_cuda_bf16.json
#      bench_models_rmat20   the same model comparison on rmat:20, only if time is left -> models_rmat20.json
#   4. tools/gpu/results.py: gpu_results.json, PASSED/FAILED per check and overall; gpu_check.log is the
#      console. At most 7 files land in LOG_DIR (the device tool hands back 8); scratch stays in /tmp.
# Every timeout comes out of one deadline, DEADLINE_S (default 465) seconds after the start.
# Exit status: 0 when every check passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PACK=.gpu_pack
SITE=/tmp/dsgraph-site
PY=${PYTHON:-python3}

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

prepare() {
  set -e
  [ -x .venv/bin/python ] || bash tools/setup_venv.sh
  mkdir -p "$PACK"
  echo "== wheels for the GPU machine"
  .venv/bin/python -m tools.gpu.pack --dir "$PACK/wheels" --max-mib 59
  echo "== CPU reference losses of the GPU training runs (about 10 minutes on 2 cores)"
  .venv/bin/python -m tools.gpu.train_check --device cpu --out "$PACK/reference_losses.json" --timeout 2400
  echo "== packed in $PACK (name it in the device tool's carry list):"
  find "$PACK" -type f -printf '%10s B  %p\n' | sort -k3
  local total
  total=$(du -sb "$PACK" | cut -f1)
  echo "== $PACK: $total bytes ($(( total / 1048576 )).$(( total % 1048576 * 100 / 1048576 )) MiB) of the 60 MiB allowed"
  [ "$total" -le $((60 * 1048576)) ]
}

left() { echo $(( DEADLINE - $(date +%s) )); }
# budget PLANNED RESERVE: PLANNED seconds, or less so that RESERVE seconds stay for the later steps
budget() { local t=$(( $(left) - $2 )); [ "$t" -gt "$1" ] && t=$1; echo "$t"; }
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$WORK/steps.tsv"; }

# run_step NAME SECONDS COMMAND...: COMMAND under `timeout SECONDS`, its exit code and time recorded
run_step() {
  local name=$1 t=$2 began rc; shift 2
  if [ "$t" -lt 10 ]; then echo "== $name: left out, $(left) s left"; record "$name" skip 0; return; fi
  echo "== $name (timeout $t s): $*"
  began=$(date +%s)
  timeout --kill-after=5 "$t" "$@"; rc=$?
  record "$name" "$rc" $(( $(date +%s) - began ))
  echo "== $name: exit $rc after $(( $(date +%s) - began )) s"
}

# the benchmark graphs, on CPU cores in the background from the start (rmat:22 takes a minute or two)
start_data() {
  PYTHONPATH="$ROOT" run_step data "$(budget 240 235)" bash -c '"$PY" -m tools.benchmarks.save_dataset rmat:20 "$WORK/rmat20.npz" & p=$!
    "$PY" -m tools.benchmarks.save_dataset rmat:22 "$WORK/rmat22.npz" && wait $p' > "$WORK/data.txt" 2>&1 &
  DATA_PID=$!
}

# wait_for FILE: until the data job has written FILE (each file appears whole) or has ended
wait_for() { until [ -f "$1" ] || ! kill -0 "$DATA_PID" 2>/dev/null; do sleep 1; done; }

# step 2: the correctness checks at once; each writes its own log, shown in order afterwards
correctness() {
  local t; t=$(budget 150 295)
  run_step kernel_tests "$t" "$PY" -m pytest -q -m gpu -p no:cacheprovider -rs tests/ops/test_cuda_gpu.py > "$WORK/gpu_tests.txt" 2>&1 &
  local tests=$!
  run_step training "$t" "$PY" -m tools.gpu.train_check --device cuda --reference "$PACK/reference_losses.json" \
    --out "$LOG_DIR/train.json" --timeout $(( t - 15 )) --jobs 6 --threads 2 > "$WORK/training.txt" 2>&1
  wait "$tests"
  cat "$WORK/gpu_tests.txt" "$WORK/training.txt"
}

# step 3: one after another, the GPU to itself
benchmarks() {
  local t
  wait_for "$WORK/rmat20.npz"
  run_step bench_kernels "$(budget 60 235)" "$PY" -m tools.benchmarks.bench_kernels --device cuda --graph "$WORK/rmat20.npz" \
    --dtype fp32 --dtype bf16 --repeats 3 --json-out "$LOG_DIR/kernels.json"
  wait "$DATA_PID"
  cat "$WORK/data.txt"
  run_step bench_kernels_rmat22 "$(budget 60 175)" "$PY" -m tools.benchmarks.bench_kernels --device cuda --graph "$WORK/rmat22.npz" \
    --dtype bf16 --backends cuda,pyg --repeats 3 --json-out "$LOG_DIR/kernels.json" --append
  t=$(budget 120 55)
  run_step bench_models_rmat22 "$t" "$PY" -m tools.benchmarks.bench_models --device cuda --dtype bf16 --dataset "$WORK/rmat22.npz" \
    --steps 4 --timeout $(( t - 20 )) --json-out "$LOG_DIR/models_rmat22.json"
  run_step profile "$(budget 45 10)" "$PY" -m dsgraph profile --backend cuda --dtype bfloat16 --reps 3 --threads 4 \
    --collectives-from docs/agp/dgx_h100_8gpu_bf16_profile.json --out "$LOG_DIR/agp_profile_cuda_bf16.json"
  t=$(budget 70 10)
  [ "$t" -ge 50 ] || t=0  # optional: only when a whole run fits
  run_step bench_models_rmat20 "$t" "$PY" -m tools.benchmarks.bench_models --device cuda --dtype bf16 --dataset "$WORK/rmat20.npz" \
    --steps 4 --timeout $(( t - 15 )) --port 29682 --json-out "$LOG_DIR/models_rmat20.json"
}

gpu_run() {
  echo "== gpu_check: logs in $LOG_DIR, deadline in $(left) s"
  [ -f "$PACK/reference_losses.json" ] && compgen -G "$PACK/wheels/*.whl" > /dev/null \
    || echo "== gpu_check: $PACK is missing or incomplete: run 'bash tools/gpu/check.sh --prepare' here and carry $PACK"
  start_data
  run_step install "$(budget 60 420)" "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$PACK"/wheels/*.whl
  export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  run_step environment "$(budget 30 420)" "$PY" -m tools.gpu.results --environment "$WORK/environment.json"
  correctness
  benchmarks
  "$PY" -m tools.gpu.results --log-dir "$LOG_DIR" --work-dir "$WORK"
}

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --prepare) prepare; exit $? ;;
esac
LOG_DIR=${1:-${OUT:-gpu_check_logs}}
mkdir -p "$LOG_DIR" && LOG_DIR=$(cd "$LOG_DIR" && pwd)
WORK=$(mktemp -d /tmp/dsgraph-gpu-check.XXXXXX)
DEADLINE=$(( $(date +%s) + ${DEADLINE_S:-465} ))
: > "$WORK/steps.tsv"
export PYTHONUNBUFFERED=1 PY WORK LOG_DIR
gpu_run 2>&1 | tee "$LOG_DIR/gpu_check.log"
status=${PIPESTATUS[0]}
rm -rf "$WORK"
exit "$status"
