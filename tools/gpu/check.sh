#!/usr/bin/env bash
# The GPU acceptance check of dsgraph: ONE command, ends by itself within 420 s on one H200 (--quick: 180 s).
#
#   bash tools/gpu/check.sh --prepare   on the CPU machine (network, ./.venv): .gpu_pack/wheels (git-ignored: the
#                                       wheels the GPU machine lacks, tools/gpu/pack.py) and, if the committed
#                                       tools/gpu/reference_losses.json is not from these sources (fingerprint),
#                                       the CPU losses of the training runs, accepted only if every run passed;
#                                       and the CUDA emulator's builds of every kernel variant (for --rehearse)
#   bash tools/gpu/check.sh [LOG_DIR]             on the GPU machine, .gpu_pack carried: the full plan
#   bash tools/gpu/check.sh --quick [LOG_DIR]     the quick plan (the most informative steps only)
#   bash tools/gpu/check.sh --rehearse [--quick]  the same step list on this CPU machine: caps x REHEARSAL_FACTOR,
#                                       CPU backends and the CUDA emulator; fails naming any step that would be cut
#   bash tools/gpu/check.sh --plan [--quick]      print the plan (step, cap s, expected GPU s, cumulative) and exit
#   bash tools/gpu/check.sh --sanitizer-line TOOL print the compute-sanitizer command line of a step and exit
#   bash tools/gpu/check.sh --help
#
# At t = 0 the warm-up starts in the background (tools/gpu/warmup.py): every CUDA module variant compiled into
# CuPy's cache (CUPY_CACHE_DIR), and every graph the run needs written once into dsgraph's dataset cache
# (DSGRAPH_CACHE), which every later step reads by the same name (rmat:20, rmat:22). A step that needs a graph
# waits for it inside its own cap, and stops at once if the graph's generator ended without writing it.
# Steps run one after another, the most informative first, each under its own `timeout` (its cap, or what is
# left of the deadline if less; a step with under 5 s left is recorded as left out). A step that fails or times
# out is recorded with its exit code and the next one runs; but if `smoke` fails, the run stops there (nothing
# after it can pass) with its traceback in the results. Full plan (docs/gpu-check.md has the budget):
#   install              .gpu_pack/wheels/*.whl, pip --no-index --target /tmp/dsgraph-site, on PYTHONPATH
#   smoke                one fp32 and one bf16 forward+backward against the reference (tools/gpu/smoke.py)
#   environment          nvidia-smi, numba, numpy, torch, CuPy, DeepSpeed, PyG versions, __cuda_stream__
#   memcheck, racecheck  compute-sanitizer on the small kernel case (tests/ops/test_cuda_gpu.py -k sanitizer):
#                        --report-api-errors no (if its --help lists it), PYTORCH_NO_CUDA_MEMORY_CACHING=1,
#                        the binary from `command -v` or the CUDA toolkit's bin
#   bench_kernels        rmat:20 fp32 + bf16 (reference, cuda, PyG-style) and the roofline    -> kernels.json
#   bench_kernels_rmat22 rmat:22 bf16 (cuda, PyG-style; the >= 50M-edge roofline figure)     (kernels.json)
#   train_strategies     the bf16 Cora run of every strategy, in ONE process (train_inprocess) -> train_strategies.json
#   kernel_tests         tests/ops/test_cuda_gpu.py -m gpu, the whole file (a skip counts as a failure)
#   train_rest           fp32 runs, checkpointed ag, rmat:20 bf16, in one process            -> train_rest.json
#   bench_models_rmat22  Graph Transformer vs PyG TransformerConv, bf16                     -> models_rmat22.json
#   profile (optional)   dsgraph profile --backend cuda --dtype bfloat16 (+ collectives)    -> agp_profile_cuda_bf16.json
# Quick plan: install, smoke, memcheck, racecheck, bench_kernels (rmat:18, bf16), train_strategies.
# An optional step that fails or is left out is reported (SKIPPED/FAILED) but never turns the verdict to FAILED.
# Last, tools/gpu/results.py writes gpu_results.json (PASSED/FAILED per step with exit code, time and reason,
# the figures) under its own timeout; if it fails or hangs, this script writes a minimal verdict instead, so
# LOG_DIR ($OUT if set, else ./gpu_check_logs) always holds gpu_results.json and gpu_check.log, 7 files at most.
# DEADLINE_S (default 395, --quick 160) bounds the steps; the results writer has RESULTS_TIMEOUT_S (15) more.
# The rehearsal multiplies every cap and the deadline by REHEARSAL_FACTOR (default 2) and, where the GPU run needs
# the GPU, runs the CPU counterpart (docs/gpu-check.md lists them); it exits 1 if a step failed, was left out or
# ran into its cap, naming it.
# For tests: CHECK_CMD_<step>=COMMAND replaces a step's command, CHECK_TIMEOUT_<step>=S its cap (results too).
# Exit status: 0 when every mandatory step passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PACK=.gpu_pack
REF=tools/gpu/reference_losses.json
SITE=/tmp/dsgraph-site
PY=${PYTHON:-python3}
MODE=full
REHEARSE=
FACTOR=${REHEARSAL_FACTOR:-2}
FULL_PLAN="install smoke environment memcheck racecheck bench_kernels bench_kernels_rmat22 train_strategies kernel_tests train_rest bench_models_rmat22 profile"
QUICK_PLAN="install smoke memcheck racecheck bench_kernels train_strategies"
OPTIONAL_STEPS="profile"
# step: cap (s) and expected seconds on one H200, full plan | quick plan (docs/gpu-check.md: how they were set)
# expected: the H200 run of 2026-12-04 (docs/benchmarks/2026-12-04-gpu-check.md); bench_models_rmat22 after that run's
# fix of the rank's edge sort (dsgraph needed 65 s of the 42 s it had), results not timed there
declare -A CAP=([install]=30 [smoke]=30 [environment]=30 [memcheck]=50 [racecheck]=50 [bench_kernels]=45
  [bench_kernels_rmat22]=60 [train_strategies]=45 [kernel_tests]=50 [train_rest]=60 [bench_models_rmat22]=110 [profile]=40
  [results]=15)
declare -A EXPECTED=([install]=4 [smoke]=11 [environment]=15 [memcheck]=11 [racecheck]=11 [bench_kernels]=26
  [bench_kernels_rmat22]=37 [train_strategies]=21 [kernel_tests]=15 [train_rest]=28 [bench_models_rmat22]=65 [profile]=15
  [results]=8)
# quick: expected from the H200 run of its plan the same day (bench_kernels took 19 s of its 20: cap 30 now)
declare -A QCAP=([install]=10 [smoke]=25 [memcheck]=25 [racecheck]=25 [bench_kernels]=30 [train_strategies]=35 [results]=15)
declare -A QEXPECTED=([install]=4 [smoke]=13 [memcheck]=15 [racecheck]=13 [bench_kernels]=19 [train_strategies]=24 [results]=8)

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

prepare() {
  set -e
  [ -x .venv/bin/python ] || bash tools/setup_venv.sh
  mkdir -p "$PACK"
  echo "== wheels for the GPU machine"
  .venv/bin/python -m tools.gpu.pack --dir "$PACK/wheels" --max-mib 59
  echo "== the CUDA emulator's builds of every kernel variant, for the rehearsal (about 150 s cold on 2 cores, 1 s warm)"
  .venv/bin/python -m tools.gpu.warmup --kernels --emulate --workers 2
  if .venv/bin/python -m tools.gpu.reference --check "$REF" && [ -z "${PREPARE_FORCE:-}" ]; then
    echo "== $REF is from these sources and every run passed: kept (PREPARE_FORCE=1 makes it again)"
  else
    echo "== CPU reference losses of the GPU training runs, in one process (about 15 minutes on 2 cores)"
    local began=$SECONDS
    # the slowest run (rmat20-bf16-ag: generating rmat:20 and 3 bf16 epochs on the CPU) took 5-9 minutes here
    .venv/bin/python -m tools.gpu.train_inprocess --device cpu --out "$PACK/reference_candidate.json" \
      --timeout 2400 --run-timeout 1200 --threads 2 || true
    echo "== reference losses in $(( SECONDS - began )) s"
    .venv/bin/python -m tools.gpu.reference --accept "$PACK/reference_candidate.json" --to "$REF"
    echo "== commit $REF with the sources it was made from"
  fi
  echo "== packed in $PACK (name it in the device tool's carry list):"
  find "$PACK" -type f -printf '%10s B  %p\n' | sort -k3
  local total
  total=$(du -sb "$PACK" | cut -f1)
  echo "== $PACK: $total bytes ($(( total / 1048576 )).$(( total % 1048576 * 100 / 1048576 )) MiB) of the 60 MiB allowed"
  [ "$total" -le $((60 * 1048576)) ]
}

plan_steps() { if [ "$MODE" = quick ]; then echo $QUICK_PLAN; else echo $FULL_PLAN; fi; }
gpu_cap() { local v="CHECK_TIMEOUT_$1"; if [ -n "${!v:-}" ]; then echo "${!v}"; elif [ "$MODE" = quick ]; then echo "${QCAP[$1]}"; else echo "${CAP[$1]}"; fi; }
cap() { if [ -n "$REHEARSE" ]; then echo $(( $(gpu_cap "$1") * FACTOR )); else gpu_cap "$1"; fi; }
expected() { if [ "$MODE" = quick ]; then echo "${QEXPECTED[$1]}"; else echo "${EXPECTED[$1]}"; fi; }
optional() { [[ " $OPTIONAL_STEPS " == *" $1 "* ]]; }

print_plan() {
  local sum_cap=0 sum_expected=0 s
  printf '%s\t%s\t%s\t%s\n' step cap_s expected_gpu_s cumulative_expected_s
  for s in $(plan_steps) results; do
    sum_cap=$(( sum_cap + $(gpu_cap "$s") )); sum_expected=$(( sum_expected + $(expected "$s") ))
    printf '%s\t%s\t%s\t%s\n' "$s" "$(gpu_cap "$s")" "$(expected "$s")" "$sum_expected"
  done
  printf '%s\t%s\t%s\t%s\n' total "$sum_cap" "$sum_expected" "$sum_expected"
}

# the compute-sanitizer binary: on PATH, else in the CUDA toolkit's bin
sanitizer_bin() {
  local d
  command -v compute-sanitizer && return
  for d in ${CUDA_HOME:-} ${CUDA_PATH:-} /usr/local/cuda /usr/local/cuda-* /opt/cuda; do
    [ -x "$d/bin/compute-sanitizer" ] && { echo "$d/bin/compute-sanitizer"; return; }
  done
  return 1
}

# sanitizer_line TOOL: the command prefix that judges the kernels only (API errors of torch's and CuPy's probing
# calls are not counted; torch's caching allocator off, so memcheck sees every out-of-bounds access)
sanitizer_line() {
  local bin help flags
  if ! bin=$(sanitizer_bin); then
    echo "echo 'compute-sanitizer: not on PATH nor in \$CUDA_HOME/bin, /usr/local/cuda*/bin' >&2; exit 127;"
    return
  fi
  help=$("$bin" --help 2>&1)
  flags="--tool $1 --error-exitcode 97"
  grep -q -- --report-api-errors <<< "$help" && flags+=" --report-api-errors no"
  grep -q -- --kernel-name <<< "$help" && flags+=" --kernel-name kns=sa_"
  echo "PYTORCH_NO_CUDA_MEMORY_CACHING=1 $bin $flags"
}

# the graphs the warm-up writes (GPU run | rehearsal: scaled to the CPU)
graph_small() {
  if [ "$MODE" = quick ]; then [ -n "$REHEARSE" ] && echo rmat:13 || echo rmat:18
  else [ -n "$REHEARSE" ] && echo rmat:14 || echo rmat:20; fi
}
graph_large() { if [ -n "$REHEARSE" ]; then echo rmat:16; else echo rmat:22; fi; }

# the command of a step on the GPU (run by `bash -c` with T = its timeout in seconds)
step_command() {
  local tests='"$PY" -m pytest -q -p no:cacheprovider -rs -m gpu'
  local small large; small=$(graph_small); large=$(graph_large)
  local dtypes='--dtype fp32 --dtype bf16 --backends reference,cuda,pyg'
  [ "$MODE" = quick ] && dtypes='--dtype bf16 --backends cuda,pyg'
  local train='"$PY" -m tools.gpu.train_inprocess --device cuda --reference "$REF" --timeout $(( T - 5 )) --run-timeout 40'
  case $1 in
    install) echo '"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$PACK"/wheels/*.whl' ;;
    smoke) echo '"$PY" -m tools.gpu.smoke' ;;
    environment) echo '"$PY" -m tools.gpu.results --environment "$WORK/environment.json"' ;;
    memcheck|racecheck) echo "$(sanitizer_line "$1") $tests -k sanitizer tests/ops/test_cuda_gpu.py" ;;
    bench_kernels) echo "wait_graph $small && \"\$PY\" -m tools.benchmarks.bench_kernels --device cuda --graph $small $dtypes --repeats 3 --json-out \"\$LOG_DIR/kernels.json\" --append" ;;
    bench_kernels_rmat22) echo "wait_graph $large && \"\$PY\" -m tools.benchmarks.bench_kernels --device cuda --graph $large --dtype bf16 --backends cuda,pyg --repeats 3 --json-out \"\$LOG_DIR/kernels.json\" --append" ;;
    train_strategies) echo "$train --group strategies --out \"\$LOG_DIR/train_strategies.json\"" ;;
    train_rest) echo "wait_graph $small && $train --group rest --out \"\$LOG_DIR/train_rest.json\"" ;;
    kernel_tests) echo "$tests tests/ops/test_cuda_gpu.py" ;;
    bench_models_rmat22) echo "wait_graph $large && \"\$PY\" -m tools.benchmarks.bench_models --device cuda --dtype bf16 --dataset $large --steps 4 --timeout \$(( T > 60 ? T - 30 : T / 2 )) --json-out \"\$LOG_DIR/models_rmat22.json\"" ;;
    profile) echo '"$PY" -m dsgraph profile --backend cuda --dtype bfloat16 --reps 3 --threads 4 --collectives-from docs/agp/dgx_h100_8gpu_bf16_profile.json --out "$LOG_DIR/agp_profile_cuda_bf16.json"' ;;
  esac
}

# the CPU counterpart of a step in the rehearsal (docs/gpu-check.md: what each stands for)
rehearsal_command() {
  local small large emu='"$PY" -m pytest -q -p no:cacheprovider tests/ops/test_cuda_emulated.py'
  small=$(graph_small); large=$(graph_large)
  local train='"$PY" -m tools.gpu.train_inprocess --device cpu --threads 2 --reference "$REF" --timeout $(( T - 5 )) --run-timeout 80'
  case $1 in
    install) echo '"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 "$PACK"/wheels/*.whl' ;;
    smoke) echo '"$PY" -m tools.gpu.smoke --emulate' ;;
    environment) echo '"$PY" -m tools.gpu.results --environment "$WORK/environment.json" --rehearsal' ;;
    memcheck|racecheck) echo "$emu -k 'every_bin_matches_reference'" ;;
    bench_kernels) local dtypes='--dtype fp32 --dtype bf16 --backends reference,cpu'; [ "$MODE" = quick ] && dtypes='--dtype bf16 --backends cpu'
      echo "wait_graph $small && \"\$PY\" -m tools.benchmarks.bench_kernels --device cpu --threads 2 --graph $small $dtypes --repeats 3 --json-out \"\$LOG_DIR/kernels.json\" --append" ;;
    bench_kernels_rmat22) echo "wait_graph $large && \"\$PY\" -m tools.benchmarks.bench_kernels --device cpu --threads 2 --graph $large --dtype bf16 --backends cpu --repeats 3 --json-out \"\$LOG_DIR/kernels.json\" --append" ;;
    train_strategies|train_rest) local runs='$("$PY" -m tools.gpu.train_inprocess --device cpu --out /dev/null --group '"${1#train_}"' --list | grep -v "^rmat\|-auto$" | paste -sd,)'
      echo "wait_graph $small && $train --group ${1#train_} --only $runs --out \"\$LOG_DIR/$1.json\"" ;;
    kernel_tests) echo "$emu -k 'every_head_dim_and_schedule and not score_bias'" ;;
    bench_models_rmat22) echo "wait_graph $small && \"\$PY\" -m tools.benchmarks.bench_models --device cpu --threads 2 --dtype bf16 --dataset $small --steps 2 --timeout \$(( T * 3 / 5 )) --json-out \"\$LOG_DIR/models_rmat22.json\"" ;;
    profile) echo '"$PY" -m dsgraph profile --backend cpu --dtype bfloat16 --reps 1 --threads 2 --max-ranks 1 --collectives-from docs/agp/dgx_h100_8gpu_bf16_profile.json --out "$LOG_DIR/agp_profile_cuda_bf16.json"' ;;
  esac
}

command_of() {
  local v="CHECK_CMD_$1"
  if [ -n "${!v:-}" ]; then echo "${!v}"; elif [ -n "$REHEARSE" ]; then rehearsal_command "$1"; else step_command "$1"; fi
}

# wait_graph SPEC: until the warm-up has written SPEC; exit 3 at once if its generator ended without it
wait_graph() {
  local tag=${1//:/_} pid
  pid=$(cat "$WORK/warm/$tag.pid" 2> /dev/null) || { echo "wait_graph: the warm-up does not generate $1"; return 3; }
  until [ -f "$WORK/warm/$tag.done" ]; do
    if ! kill -0 "$pid" 2> /dev/null && [ ! -f "$WORK/warm/$tag.done" ]; then
      echo "wait_graph: the generator of $1 ended without writing it; its output ends:"; tail -5 "$WORK/warm/$tag.txt"
      return 3
    fi
    sleep 0.5
  done
}

left() { echo $(( DEADLINE - $(date +%s) )); }
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$WORK/steps.tsv"; }

# run_step NAME: its command under `timeout` (its cap or the time left; under 5 s: left out), output in WORK/NAME.txt
run_step() {
  local name=$1 t began rc
  t=$(cap "$name"); [ "$(left)" -lt "$t" ] && t=$(left)
  if [ "$t" -lt 5 ]; then echo "== $name: left out, $(left) s left"; record "$name" skip 0; return 0; fi
  echo "== $name (timeout $t s)"
  began=$(date +%s)
  T=$t timeout --kill-after=3 "$t" bash -c "$(command_of "$name")" > "$WORK/$name.txt" 2>&1; rc=$?
  tail -c 6000 "$WORK/$name.txt"
  record "$name" "$rc" $(( $(date +%s) - began ))
  echo "== $name: exit $rc after $(( $(date +%s) - began )) s ($(left) s left)"
  return "$rc"
}

# warm_one TAG COMMAND: one warm-up job in the background (300 s at most), its pid in WORK/warm/TAG.pid, TAG.done when
# it succeeded; stop_warmup ends its `timeout`, which ends the job's whole process group
warm_one() {
  ( timeout --kill-after=3 300 bash -c "$2" > "$WORK/warm/$1.txt" 2>&1 < /dev/null && touch "$WORK/warm/$1.done" ) &
  echo $! > "$WORK/warm/$1.pid"
}

start_warmup() {
  mkdir -p "$WORK/warm"
  local emulate=; [ -n "$REHEARSE" ] && emulate=--emulate
  [ -n "${CHECK_NO_WARMUP:-}" ] && return
  warm_one kernels "\"\$PY\" -m tools.gpu.warmup --kernels $emulate"
  local g; for g in $(graph_small) $( [ "$MODE" = full ] && graph_large ); do
    warm_one "${g//:/_}" "\"\$PY\" -m tools.gpu.warmup --graph $g"
  done
}
stop_warmup() {
  local f; for f in "$WORK"/warm/*.pid; do [ -f "$f" ] && pkill -P "$(cat "$f")" 2> /dev/null; done
  for f in "$WORK"/warm/*.txt; do [ -f "$f" ] && { echo "== warm-up $(basename "$f" .txt):"; tail -3 "$f"; }; done
}

# the results writer under its own timeout; a minimal verdict from steps.tsv if it wrote nothing
write_results() {
  local t cmd
  t=$(cap results)
  cmd=${CHECK_CMD_results:-'"$PY" -m tools.gpu.results --log-dir "$LOG_DIR" --work-dir "$WORK" --plan "$PLAN" --optional "$OPTIONAL_STEPS" ${REHEARSE:+--rehearsal}'}
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

# the rehearsal's own verdict: every step of the plan ran, exited 0 and finished inside its (scaled) cap
rehearsal_verdict() {
  local s rc secs c bad=0
  printf '%-22s %8s %11s %8s %14s\n' step cap_s rehearsed_s gpu_cap expected_gpu_s
  for s in $(plan_steps); do
    rc=$(awk -F'\t' -v s="$s" '$1 == s {print $2}' "$WORK/steps.tsv"); secs=$(awk -F'\t' -v s="$s" '$1 == s {print $3}' "$WORK/steps.tsv")
    c=$(cap "$s")
    printf '%-22s %8s %11s %8s %14s\n' "$s" "$c" "${secs:--}" "$(gpu_cap "$s")" "$(expected "$s")"
    if [ -z "$rc" ] || [ "$rc" = skip ] || [ "$rc" = stop ]; then echo "rehearsal: step $s would be cut: it was left out (${rc:-never ran})"; bad=1
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ] || [ "${secs:-0}" -ge "$c" ]; then echo "rehearsal: step $s would be cut: it ran into its cap ($secs s of $c s)"; bad=1
    elif [ "$rc" != 0 ]; then echo "rehearsal: step $s failed with exit $rc"; bad=1
    fi
  done
  printf '%-22s %8s %11s %8s %14s\n' results "$(cap results)" "$RESULTS_S" "$(gpu_cap results)" "$(expected results)"
  echo "rehearsal: total $(( $(date +%s) - STARTED )) s of $(( (DEADLINE_RUN + $(gpu_cap results)) * FACTOR )) s (factor $FACTOR)"
  [ "$bad" = 0 ] && echo "rehearsal: PASSED" || echo "rehearsal: FAILED"
  return "$bad"
}

gpu_run() {
  echo "== gpu_check ($MODE${REHEARSE:+, rehearsal x$FACTOR}): logs in $LOG_DIR, deadline in $(left) s; plan: $(plan_steps)"
  [ -f "$REF" ] && compgen -G "$PACK/wheels/*.whl" > /dev/null \
    || echo "== gpu_check: $PACK/wheels or $REF is missing: run 'bash tools/gpu/check.sh --prepare' here and carry $PACK"
  start_warmup
  local s stopped=
  for s in $(plan_steps); do
    if [ -n "$stopped" ]; then record "$s" stop 0; continue; fi
    run_step "$s"; local rc=$?
    [ "$s" = install ] && [ -z "$REHEARSE" ] && export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
    if [ "$s" = smoke ] && [ "$rc" != 0 ]; then stopped=1; echo "== smoke failed: the run stops here (its traceback is in the results)"; fi
  done
  stop_warmup
  local began; began=$(date +%s)
  write_results; local status=$?
  RESULTS_S=$(( $(date +%s) - began ))
  if [ -n "$REHEARSE" ]; then rehearsal_verdict || status=1; fi
  return "$status"
}

while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --prepare) prepare; exit $? ;;
    --quick) MODE=quick; shift ;;
    --rehearse) REHEARSE=1; shift ;;
    --plan) PRINT_PLAN=1; shift ;;
    --sanitizer-line) sanitizer_line "${2:?--sanitizer-line needs memcheck or racecheck}"; exit 0 ;;
    -*) echo "check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ -n "${PRINT_PLAN:-}" ]; then print_plan; exit 0; fi
[ -n "$REHEARSE" ] && [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && PY=$ROOT/.venv/bin/python  # the CPU machine's
LOG_DIR=${1:-${OUT:-gpu_check_logs}}
mkdir -p "$LOG_DIR" && LOG_DIR=$(cd "$LOG_DIR" && pwd)
WORK=$(mktemp -d /tmp/dsgraph-gpu-check.XXXXXX)
[ -n "$REHEARSE" ] && SITE=$WORK/site
[ "$MODE" = quick ] && DEADLINE_RUN=${DEADLINE_S:-160} || DEADLINE_RUN=${DEADLINE_S:-395}
STARTED=$(date +%s)
SCALE=1; [ -n "$REHEARSE" ] && SCALE=$FACTOR
DEADLINE=$(( STARTED + DEADLINE_RUN * SCALE ))
: > "$WORK/steps.tsv"
export PYTHONUNBUFFERED=1 PY WORK LOG_DIR PACK REF SITE ROOT MODE REHEARSE OPTIONAL_STEPS
export CUPY_CACHE_DIR=$WORK/cupy-cache DSGRAPH_CACHE=$WORK/graphs
export -f wait_graph
gpu_run 2>&1 | tee "$LOG_DIR/gpu_check.log"
status=${PIPESTATUS[0]}
rm -rf "$WORK"
exit "$status"
