#!/usr/bin/env bash
# Downloads the wheels scripts/gpu-check.sh installs on a GPU machine without a registry
# (requirements-gpu-check.txt) into .whl/ (ignored by git; carried to the machine).
# Usage: scripts/gpu-wheels.sh [PYTHON_VERSION]   (default 3.12, the H200 image's)
set -euo pipefail
cd "$(dirname "$0")/.."
pyver=${1:-3.12}
rm -rf .whl && mkdir -p .whl
grep -v '^\s*#' requirements-gpu-check.txt | grep -v '^\s*$' | while read -r req; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .whl "$req"
done
du -sh .whl
