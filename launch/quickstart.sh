#!/usr/bin/env bash
# Sets up ./.venv and trains the Graph Transformer on the bundled Cora graph:
# on every GPU when there are GPUs (ds_configs/gpu_quickstart.json: bf16, ZeRO-2, torch's Adam so nothing
# JIT-builds), else on 2 CPU ranks (gloo, ds_configs/cpu_quickstart.json). Extra arguments go to launch/train.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_venv.sh
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true); fi
if [ "$gpus" -gt 0 ]; then
  exec .venv/bin/deepspeed --num_gpus "$gpus" launch/train.py --deepspeed_config ds_configs/gpu_quickstart.json "$@"
fi
exec .venv/bin/deepspeed --num_accelerators 2 launch/train.py --deepspeed_config ds_configs/cpu_quickstart.json "$@"
