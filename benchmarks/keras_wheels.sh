#!/usr/bin/env bash
# Downloads Keras 3 and its dependencies as wheels for the GPU machine, which has no registry
# access: `gpu.py` installs them there with `pip install --no-index --find-links DIR keras`
# into a venv that also sees the machine's own jax (see venvs.offline_keras_python).
#
# Usage: benchmarks/keras_wheels.sh [DIR] [PYTHON_VERSION]   (defaults: .peer-wheels 3.12)
# Run it from the checkout on a machine with registry access; DIR is git-ignored and travels
# with the working tree. Keras does not depend on jax, so no jax wheel is fetched: the GPU
# machine's preinstalled jax is used.
set -euo pipefail
dir="${1:-.peer-wheels}"
py="${2:-3.12}"
KERAS_VERSION=3.15.1  # as venvs.pins("keras3")
python -m pip download "keras==${KERAS_VERSION}" --dest "$dir" --only-binary=:all: \
  --python-version "$py" --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_28_x86_64 --platform any
ls -1 "$dir"
