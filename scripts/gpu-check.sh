#!/usr/bin/env bash
# One prepared GPU validation run: every gpu-marked test, then every suite's CUDA cases in
# the quick profile, on a CUDA machine with PyTorch preinstalled and no network.
#
#   scripts/gpu-check.sh OUT_DIR            run it; results and logs go to OUT_DIR
#   scripts/gpu-check.sh OUT_DIR --dry-run  on any machine: show what it would select, with
#                                           nothing importable that the GPU image lacks
#
# Missing Python packages travel as wheels in .whl/ (scripts/gpu-wheels.sh fetches them);
# they are installed into /tmp/site, never over the machine's own torch.
#
# The whole check fits 8 minutes, its wheel install included, so that a 15-minute lease with
# a cold start leaves time for one rerun. Each step has its own limit (the LIMITS below, in
# seconds; tests/test_scripts.py keeps their sum within 7.5 minutes, 30 s being left for the
# summaries): a step that runs
# over ends, the next one starts. The suites' cases run once, in `release-bench run`, one
# suite per step; the tests' pytest views of those same cases (test_conformance,
# test_benchmark_case) are not run again, and the workloads' pytest-benchmark views run
# once each, untimed (--benchmark-disable): what they add is the adapter's CUDA path.
# clean_exit cases (amp, profiler) run 5 fresh processes instead of 20.
#
# OUT_DIR gets gpu-tests.log, gpu-tests.xml, gpu-run-<suite>.log, summary.txt and
# runs/<machine>/<time>-quick.json (one per suite: the GPU reference runs).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-check.sh OUT_DIR [--dry-run]}
dry=${2:-}
mkdir -p "$out"
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# LIMITS: the wheel install, require-cuda, the tests, then each suite with CUDA cases
LIMIT_WHEELS=20
LIMIT_REQUIRE=20
LIMIT_TESTS=120
SUITE_LIMITS="amp:120 profiler:60 telemetry:25 rpc:40 ddp_rpc:45"
params_of() {  # what a suite's run sets besides the profile
  case $1 in amp|profiler) echo "--param trials=5" ;; esac
}
TEST_SELECTION=(-m gpu -k "not test_conformance and not test_benchmark_case"
                --benchmark-disable)
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  timeout $LIMIT_WHEELS $PY -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu-check: could not install .whl/"; exit 2; }
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
bench="$PY -m harness.cli"

if [ "$dry" = "--dry-run" ]; then
  # as the GPU image would: what it lacks, and no wheel brings, cannot be imported
  image="$PY scripts/gpu-image.py"
  {
    echo "== gpu-check dry run: python $($PY -c 'import sys; print(sys.version.split()[0])')"
    echo "== tests selected: ${TEST_SELECTION[*]}"
    $image pytest "${TEST_SELECTION[@]}" --collect-only -q -p no:cacheprovider
    st=$?
    echo "== CUDA benchmark and conformance cases (quick profile), by suite"
    for entry in $SUITE_LIMITS; do
      echo "-- ${entry%%:*} (limit ${entry##*:} s)"
      $image harness.cli run --suite "${entry%%:*}" --device cuda --profile quick \
        $(params_of "${entry%%:*}") --dry-run || st=1
    done
    exit $st
  } 2>&1 | tee "$out/dry-run.log"
  exit "${PIPESTATUS[0]}"
fi

timeout $LIMIT_REQUIRE $bench require-cuda || exit 2
status=0
echo "== gpu-marked tests"
timeout $LIMIT_TESTS $PY -m pytest "${TEST_SELECTION[@]}" -q -p no:cacheprovider \
  -o addopts="-ra" --junitxml="$out/gpu-tests.xml" --timeout=60 2>&1 | tee "$out/gpu-tests.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
for entry in $SUITE_LIMITS; do
  suite=${entry%%:*}
  echo "== CUDA cases of $suite, quick profile (limit ${entry##*:} s)"
  timeout "${entry##*:}" $bench run --suite "$suite" --device cuda --profile quick \
    $(params_of "$suite") --out "$out/runs" 2>&1 | tee "$out/gpu-run-$suite.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
: > "$out/summary.txt"
for run in "$out"/runs/*/*.json; do
  [ -f "$run" ] && $bench show "$run" >> "$out/summary.txt" 2>&1
done
echo "gpu-check: exit $status; runs: $(ls "$out"/runs/*/*.json 2>/dev/null | wc -l)"
exit $status
