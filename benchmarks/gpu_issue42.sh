#!/usr/bin/env bash
# Issue 42's device call, prepared on a machine without a GPU and not yet run: gpu.py --short
# (the full ResNet-18 and GPT-2-small LM on less data), Keras 3 at steps_per_execution 1 and
# 32, and every case's peak device memory measured in a process of its own (--case-memory).
#
# Usage, from the checkout on the GPU machine, with .peer-wheels/ carried there (made by
# benchmarks/keras_wheels.sh where a registry can be reached; without it the Keras rows say
# "unavailable" and the rest runs):
#
#   benchmarks/gpu_issue42.sh                        # everything, in one call
#   benchmarks/gpu_issue42.sh mirrorfit              # or in two: mirrorfit, hand-written, memory
#   benchmarks/gpu_issue42.sh keras DIR/REPORT.json  #   then the Keras 3 cases, merged into it
#
# OUT (default benchmarks/results) gets the report (<device>-<date>.json and .md); TIMEOUT
# (seconds, default 540) bounds the run, so a device call of 600 s returns what it wrote.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-all}" in
  all) args=(--case-memory) ;;
  mirrorfit) args=(--no-keras --case-memory) ;;
  keras) args=(--keras-only --merge-into "$2") ;;
  *) echo "usage: $0 [all | mirrorfit | keras REPORT.json]" >&2; exit 2 ;;
esac
PYTHONPATH=. timeout "${TIMEOUT:-540}" python benchmarks/gpu.py --short "${args[@]}" \
  --out "${OUT:-benchmarks/results}"
