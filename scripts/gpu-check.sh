#!/usr/bin/env bash
# One prepared GPU validation run: every gpu-marked test, then every suite's CUDA cases in
# the quick profile, on a CUDA machine with PyTorch preinstalled and no network.
#
#   scripts/gpu-check.sh OUT_DIR            run it; results and logs go to OUT_DIR
#   scripts/gpu-check.sh OUT_DIR --dry-run  on any machine: show what it would select
#
# Missing Python packages travel as wheels in .whl/ (scripts/gpu-wheels.sh fetches them);
# they are installed into /tmp/site, never over the machine's own torch. Whole run: under 8
# minutes (tests 4, benchmarks 4). OUT_DIR gets gpu-tests.log, gpu-tests.xml, gpu-run.log,
# summary.txt and runs/<machine>/<time>-quick.json (the GPU reference run).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-check.sh OUT_DIR [--dry-run]}
dry=${2:-}
mkdir -p "$out"
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || { echo "gpu-check: could not install .whl/"; exit 2; }
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
bench="$PY -m harness.cli"

if [ "$dry" = "--dry-run" ]; then
  {
    echo "== gpu-check dry run: python $($PY -c 'import sys; print(sys.version.split()[0])')"
    echo "== tests selected by -m gpu"
    $PY -m pytest -m gpu --collect-only -q -p no:cacheprovider
    echo "== CUDA benchmark and conformance cases (quick profile)"
    $bench run --device cuda --profile quick --dry-run
  } 2>&1 | tee "$out/dry-run.log"
  exit "${PIPESTATUS[0]}"
fi

$bench require-cuda || exit 2
status=0
echo "== gpu-marked tests"
timeout 240 $PY -m pytest -m gpu -q -p no:cacheprovider -o addopts="-ra" \
  --junitxml="$out/gpu-tests.xml" --timeout=120 2>&1 | tee "$out/gpu-tests.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "== CUDA cases, quick profile"
timeout 270 $bench run --device cuda --profile quick --out "$out/runs" 2>&1 | tee "$out/gpu-run.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
run=$(ls "$out"/runs/*/*.json 2>/dev/null | tail -1)
[ -n "$run" ] && $bench show "$run" > "$out/summary.txt" 2>&1
echo "gpu-check: exit $status; run: ${run:-none}"
exit $status
