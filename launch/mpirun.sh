#!/usr/bin/env bash
# Launch training with MPI: rank and world size come from MPI (deepspeed's MPI discovery), and
# small control messages travel through mpi4py. Extra arguments go to launch/train.py.
#
#   NP=8 HOSTFILE=launch/hostfile.example launch/mpirun.sh --deepspeed_config ds_configs/multi_gpu_rmat.json
#   NP=2 launch/mpirun.sh --deepspeed_config ds_configs/cpu_quickstart.json --epochs 2     # one machine
#
# NP: total ranks (default 2). HOSTFILE: MPI hostfile, "host slots=N" lines as for deepspeed (optional).
# MASTER_ADDR / MASTER_PORT: torch.distributed rendezvous (default: rank 0's first address, port 29500).
# MPIRUN: the MPI launcher (default: mpirun beside this checkout's python, else on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MPIRUN=${MPIRUN:-$( [ -x .venv/bin/mpirun ] && echo .venv/bin/mpirun || command -v mpirun )}
NP=${NP:-2}
args=(-n "$NP")
if [ -n "${HOSTFILE:-}" ]; then
  # MPICH/Hydra reads "host:N"; convert deepspeed's "host slots=N" lines.
  machinefile=$(mktemp)
  trap 'rm -f "$machinefile"' EXIT
  sed -E -e 's/#.*//' -e '/^[[:space:]]*$/d' -e 's/^[[:space:]]*([^[:space:]]+)[[:space:]]+slots=([0-9]+).*/\1:\2/' "$HOSTFILE" > "$machinefile"
  args+=(-f "$machinefile")
fi
export MASTER_PORT=${MASTER_PORT:-29500}
[ -n "${MASTER_ADDR:-}" ] && args+=(-genv MASTER_ADDR "$MASTER_ADDR")
exec "$MPIRUN" "${args[@]}" -genv MASTER_PORT "$MASTER_PORT" "$PY" launch/train.py "$@"
