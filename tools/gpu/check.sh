#!/usr/bin/env bash
# The GPU acceptance check of dsgraph: ONE command, under 5 minutes on one H200 (--quick: under 2).
#
#   bash tools/gpu/check.sh --prepare   on the CPU machine (network, ./.venv): packs .gpu_pack/ (git-ignored,
#                                       < 60 MiB): the wheels the GPU machine lacks (DeepSpeed built here, its
#                                       missing requirements for CPython 3.12; tools/gpu/pack.py) and the CPU
#                                       losses of the training runs (tools/gpu/train_inprocess.py, a few minutes)
#   bash tools/gpu/check.sh [LOG_DIR]          on the GPU machine, .gpu_pack carried: the full plan
#   bash tools/gpu/check.sh --quick [LOG_DIR]  the quick plan (the most informative steps only)
#   bash tools/gpu/check.sh --plan [--quick]   print the plan (step, timeout s, planned s, cumulative) and exit
#   bash tools/gpu/check.sh --help
#
# Steps run one after another, the most informative first, each under its own `timeout` (its cap, or what is
# left of the deadline if less; a step with under 5 s left is recorded as left out). A step that fails or
# times out is recorded with its exit code and the next one runs. Full plan (docs/gpu-check.md has the budget):
#   install              .gpu_pack/wheels/*.whl, pip --no-index --target /tmp/dsgraph-site, on PYTHONPATH
#   environment          nvidia-smi, torch, CuPy, DeepSpeed, PyG versions                    (gpu_results.json)
#   memcheck, racecheck  compute-sanitizer --tool memcheck / racecheck on the small kernel case
#                        (tests/ops/test_cuda_gpu.py -k sanitizer; only the sa_* kernels instrumented)
#   bench_kernels        rmat:20 fp32 + bf16 (reference, cuda, PyG-style) and the roofline    -> kernels.json
#   bench_kernels_rmat22 rmat:22 bf16 (cuda, PyG-style; the >= 50M-edge roofline figure)     (kernels.json)
#   train_strategies     the bf16 Cora run of every strategy, in ONE process (train_inprocess) -> train_strategies.json
#   kernel_tests         tests/ops/test_cuda_gpu.py -m gpu, the whole file (a skip counts as a failure)
#   train_rest           fp32 runs, checkpointed ag, rmat:20 bf16, in one process            -> train_rest.json
#   bench_models_rmat22  Graph Transformer vs PyG TransformerConv, bf16                     -> models_rmat22.json
#   profile              dsgraph profile --backend cuda --dtype bfloat16 (+ collectives)    -> agp_profile_cuda_bf16.json
# Quick plan: install, memcheck, racecheck, bench_kernels (rmat:18, bf16), train_strategies.
# From the start, rmat:20 and rmat:22 are written as .npz in the background on CPU cores (full plan only;
# tools/benchmarks/save_dataset.py); a benchmark waits for its file inside its own timeout.
# Last, tools/gpu/results.py writes gpu_results.json (PASSED/FAILED per step with exit code, time and reason,
# the figures) under its own timeout; if it fails or hangs, this script writes a minimal verdict instead, so
# LOG_DIR ($OUT if set, else ./gpu_check_logs) always holds gpu_results.json and gpu_check.log, 7 files at most.
# DEADLINE_S (default 270, --quick 100) bounds the steps; the results writer has RESULTS_TIMEOUT_S (15) more.
# For tests: CHECK_CMD_<step>=COMMAND replaces a step's command, CHECK_TIMEOUT_<step>=S its cap (results too).
# Exit status: 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PACK=.gpu_pack
SITE=/tmp/dsgraph-site
PY=${PYTHON:-python3}
MODE=full
FULL_PLAN="install environment memcheck racecheck bench_kernels bench_kernels_rmat22 train_strategies kernel_tests train_rest bench_models_rmat22 profile"
QUICK_PLAN="install memcheck racecheck bench_kernels train_strategies"
# step: timeout cap (s) and planned (s), full plan | quick plan
declare -A CAP=([install]=30 [environment]=20 [memcheck]=45 [racecheck]=45 [bench_kernels]=35 [bench_kernels_rmat22]=35
  [train_strategies]=45 [kernel_tests]=50 [train_rest]=60 [bench_models_rmat22]=60 [profile]=30 [results]=15)
declare -A PLANNED=([install]=8 [environment]=7 [memcheck]=30 [racecheck]=30 [bench_kernels]=20 [bench_kernels_rmat22]=20
  [train_strategies]=25 [kernel_tests]=35 [train_rest]=35 [bench_models_rmat22]=40 [profile]=20 [results]=8)
declare -A QCAP=([install]=12 [memcheck]=25 [racecheck]=25 [bench_kernels]=15 [train_strategies]=23 [results]=15)
declare -A QPLANNED=([install]=8 [memcheck]=20 [racecheck]=20 [bench_kernels]=10 [train_strategies]=15 [results]=8)

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

prepare() {
  set -e
  [ -x .venv/bin/python ] || bash tools/setup_venv.sh
  mkdir -p "$PACK"
  echo "== wheels for the GPU machine"
  .venv/bin/python -m tools.gpu.pack --dir "$PACK/wheels" --max-mib 59
  echo "== CPU reference losses of the GPU training runs, in one process (a few minutes on 2 cores)"
  local began=$SECONDS
  .venv/bin/python -m tools.gpu.train_inprocess --device cpu --out "$PACK/reference_losses.json" --timeout 1500 --threads 2
  echo "== reference losses in $(( SECONDS - began )) s"
  echo "== packed in $PACK (name it in the device tool's carry list):"
  find "$PACK" -type f -printf '%10s B  %p\n' | sort -k3
  local total
  total=$(du -sb "$PACK" | cut -f1)
  echo "== $PACK: $total bytes ($(( total / 1048576 )).$(( total % 1048576 * 100 / 1048576 )) MiB) of the 60 MiB allowed"
  [ "$total" -le $((60 * 1048576)) ]
}

plan_steps() { if [ "$MODE" = quick ]; then echo $QUICK_PLAN; else echo $FULL_PLAN; fi; }
cap() { local v="CHECK_TIMEOUT_$1"; if [ -n "${!v:-}" ]; then echo "${!v}"; elif [ "$MODE" = quick ]; then echo "${QCAP[$1]}"; else echo "${CAP[$1]}"; fi; }
planned() { if [ "$MODE" = quick ]; then echo "${QPLANNED[$1]}"; else echo "${PLANNED[$1]}"; fi; }

print_plan() {
  local sum_cap=0 sum_planned=0 s
  printf '%s\t%s\t%s\t%s\n' step timeout_s planned_s cumulative_planned_s
  for s in $(plan_steps) results; do
    sum_cap=$(( sum_cap + $(cap "$s") )); sum_planned=$(( sum_planned + $(planned "$s") ))
    printf '%s\t%s\t%s\t%s\n' "$s" "$(cap "$s")" "$(planned "$s")" "$sum_planned"
  done
  printf '%s\t%s\t%s\t%s\n' total "$sum_cap" "$sum_planned" "$sum_planned"
}

# the command of a step (run by `bash -c` with T = its timeout in seconds)
step_command() {
  local v="CHECK_CMD_$1"
  if [ -n "${!v:-}" ]; then echo "${!v}"; return; fi
  local tests='"$PY" -m pytest -q -p no:cacheprovider -rs -m gpu'
  local san='compute-sanitizer --error-exitcode 97 $( compute-sanitizer --help 2>&1 | grep -q -- --kernel-name && echo --kernel-name kns=sa_ )'
  local wait20='until [ -f "$WORK/rmat20.npz" ]; do sleep 1; done;' wait22='until [ -f "$WORK/rmat22.npz" ]; do sleep 1; done;'
  local graph='--graph "$WORK/rmat20.npz" --dtype fp32 --dtype bf16'
  [ "$MODE" = quick ] && graph='--graph rmat:18 --dtype bf16 --backends cuda,pyg' wait20=
  case $1 in
    install) echo '"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$PACK"/wheels/*.whl' ;;
    environment) echo '"$PY" -m tools.gpu.results --environment "$WORK/environment.json"' ;;
    memcheck|racecheck) echo "$san --tool $1 $tests -k sanitizer tests/ops/test_cuda_gpu.py" ;;
    bench_kernels) echo "$wait20 \"\$PY\" -m tools.benchmarks.bench_kernels --device cuda $graph --repeats 3 --json-out \"\$LOG_DIR/kernels.json\" --append" ;;
    bench_kernels_rmat22) echo "$wait22"' "$PY" -m tools.benchmarks.bench_kernels --device cuda --graph "$WORK/rmat22.npz" --dtype bf16 --backends cuda,pyg --repeats 3 --json-out "$LOG_DIR/kernels.json" --append' ;;
    train_strategies|train_rest) echo '"$PY" -m tools.gpu.train_inprocess --device cuda --group '"${1#train_}"' --reference "$PACK/reference_losses.json" --out "$LOG_DIR/'"$1"'.json" --timeout $(( T - 5 )) --run-timeout 40' ;;
    kernel_tests) echo "$tests tests/ops/test_cuda_gpu.py" ;;
    bench_models_rmat22) echo "$wait22"' "$PY" -m tools.benchmarks.bench_models --device cuda --dtype bf16 --dataset "$WORK/rmat22.npz" --steps 4 --timeout $(( T * 3 / 5 )) --json-out "$LOG_DIR/models_rmat22.json"' ;;
    profile) echo '"$PY" -m dsgraph profile --backend cuda --dtype bfloat16 --reps 3 --threads 4 --collectives-from docs/agp/dgx_h100_8gpu_bf16_profile.json --out "$LOG_DIR/agp_profile_cuda_bf16.json"' ;;
  esac
}

left() { echo $(( DEADLINE - $(date +%s) )); }
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$WORK/steps.tsv"; }

# run_step NAME: its command under `timeout` (its cap or the time left; under 5 s: left out), output in WORK/NAME.txt and the console
run_step() {
  local name=$1 t began rc
  t=$(cap "$name"); [ "$(left)" -lt "$t" ] && t=$(left)
  if [ "$t" -lt 5 ]; then echo "== $name: left out, $(left) s left"; record "$name" skip 0; return; fi
  echo "== $name (timeout $t s)"
  began=$(date +%s)
  T=$t timeout --kill-after=3 "$t" bash -c "$(step_command "$name")" > "$WORK/$name.txt" 2>&1; rc=$?
  tail -c 6000 "$WORK/$name.txt"
  record "$name" "$rc" $(( $(date +%s) - began ))
  echo "== $name: exit $rc after $(( $(date +%s) - began )) s ($(left) s left)"
}

start_data() {
  [ "$MODE" = quick ] && return
  # timeout kills its whole process group: at its limit, or when gpu_run ends it early (stop_data)
  timeout --kill-after=3 200 bash -c '"$PY" -m tools.benchmarks.save_dataset rmat:20 "$WORK/rmat20.npz" & p=$!
      "$PY" -m tools.benchmarks.save_dataset rmat:22 "$WORK/rmat22.npz"; wait $p' > "$WORK/data.txt" 2>&1 < /dev/null &
  DATA_PID=$!
}
stop_data() { [ -n "${DATA_PID:-}" ] && kill "$DATA_PID" 2>/dev/null; [ -f "$WORK/data.txt" ] && cat "$WORK/data.txt"; }

# the results writer under its own timeout; a minimal verdict from steps.tsv if it wrote nothing
write_results() {
  local t cmd
  t=$(cap results)
  cmd=${CHECK_CMD_results:-'"$PY" -m tools.gpu.results --log-dir "$LOG_DIR" --work-dir "$WORK" --plan "$PLAN"'}
  rm -f "$LOG_DIR/gpu_results.json"
  PLAN="$(plan_steps)" timeout --kill-after=3 "$t" bash -c "$cmd"; local rc=$?
  if [ ! -s "$LOG_DIR/gpu_results.json" ]; then
    echo "== results: the writer ended with exit $rc and wrote nothing; minimal verdict from steps.tsv"
    { printf '{"format": "dsgraph-gpu-results", "passed": false, "minimal": true, "reason": "results writer exit %s", "steps": [' "$rc"
      awk -F'\t' '{printf "%s{\"step\": \"%s\", \"exit_code\": \"%s\", \"seconds\": %s}", (NR > 1 ? ", " : ""), $1, $2, $3}' "$WORK/steps.tsv"
      printf ']}\n'; } > "$LOG_DIR/gpu_results.json"
    echo "gpu_check: FAILED (minimal results in $LOG_DIR/gpu_results.json)"
    return 1
  fi
  return "$rc"
}

gpu_run() {
  echo "== gpu_check ($MODE): logs in $LOG_DIR, deadline in $(left) s; plan: $(plan_steps)"
  [ -f "$PACK/reference_losses.json" ] && compgen -G "$PACK/wheels/*.whl" > /dev/null \
    || echo "== gpu_check: $PACK is missing or incomplete: run 'bash tools/gpu/check.sh --prepare' here and carry $PACK"
  start_data
  local s
  for s in $(plan_steps); do
    run_step "$s"
    [ "$s" = install ] && export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  done
  stop_data
  write_results
}

while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --prepare) prepare; exit $? ;;
    --quick) MODE=quick; shift ;;
    --plan) PRINT_PLAN=1; shift ;;
    *) break ;;
  esac
done
if [ -n "${PRINT_PLAN:-}" ]; then print_plan; exit 0; fi
LOG_DIR=${1:-${OUT:-gpu_check_logs}}
mkdir -p "$LOG_DIR" && LOG_DIR=$(cd "$LOG_DIR" && pwd)
WORK=$(mktemp -d /tmp/dsgraph-gpu-check.XXXXXX)
[ "$MODE" = quick ] && default_deadline=100 || default_deadline=270
DEADLINE=$(( $(date +%s) + ${DEADLINE_S:-$default_deadline} ))
: > "$WORK/steps.tsv"
export PYTHONUNBUFFERED=1 PY WORK LOG_DIR PACK SITE ROOT MODE
gpu_run 2>&1 | tee "$LOG_DIR/gpu_check.log"
status=${PIPESTATUS[0]}
rm -rf "$WORK"
exit "$status"
