#!/usr/bin/env bash
# Issue 43's multi-GPU run, prepared on a machine without a GPU and not yet run:
# benchmarks/fsdp.py at D=2, 4 and 8 GPUs, each of mirrored, shard_optimizer_state=True and
# shard_params=True in a process of its own: GPT-2 small (float32, Adam, 4 rows of 1024
# tokens per replica) for device memory (live arrays, the compiled step's memory_analysis()
# and peak_bytes_in_use) and step time, then the largest DecoderLM (width 1024) whose
# compiled train step fits BUDGET_MIB per device.
#
# Usage, from the checkout on a machine with 8 GPUs (with fewer: DEVICES="2 4"):
#
#   benchmarks/gpu_issue43.sh
#
# OUT (default benchmarks/results) gets fsdp-gpu-<cores>core-<date>.json and .md; TIMEOUT
# (seconds, default 3000) bounds the run.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a devices <<< "${DEVICES:-2 4 8}"
PYTHONPATH=. timeout "${TIMEOUT:-3000}" python benchmarks/fsdp.py --devices "${devices[@]}" \
  --budget-mib "${BUDGET_MIB:-8192}" --out "${OUT:-benchmarks/results}"
