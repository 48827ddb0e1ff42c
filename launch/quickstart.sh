#!/usr/bin/env bash
# Sets up ./.venv and trains the Graph Transformer on the bundled Cora graph:
# on every GPU when there are GPUs, else on 2 CPU ranks (gloo). Extra arguments go to launch/train.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_venv.sh
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | wc -l); fi
if [ "$gpus" -gt 0 ]; then
  exec .venv/bin/deepspeed --num_gpus "$gpus" launch/train.py --deepspeed_config ds_configs/cpu_quickstart.json "$@"
fi
exec .venv/bin/deepspeed --num_accelerators 2 launch/train.py --deepspeed_config ds_configs/cpu_quickstart.json "$@"
