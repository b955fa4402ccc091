#!/usr/bin/env bash
# One prepared GPU validation run: every gpu-marked test, then every suite's CUDA cases in
# the quick profile, on a CUDA machine with PyTorch preinstalled and no network.
#
#   scripts/gpu-check.sh OUT_DIR            run it; results and logs go to OUT_DIR
#   scripts/gpu-check.sh OUT_DIR --dry-run  on any machine: show what it would select, with
#                                           nothing importable that the GPU image lacks, and
#                                           refuse numpy or scipy older than the code needs
#
# Missing Python packages travel as wheels in .whl/ (scripts/gpu-wheels.sh fetches them);
# they are installed into /tmp/site, never over the machine's own torch.
#
# Every step runs under its own time limit (the LIMIT_* and SUITE_LIMITS below, in seconds;
# a step that runs over ends, and the next one starts). The limits add up to 490 s: within
# the 10 minutes a lent machine runs one command, whatever a step takes (tests/test_scripts.py
# keeps every command under a limit and the sum within 570 s). How long the check takes on
# the image is not measured yet: its summary gives each step's time. The suites' cases run
# once, in `release-bench run`, one suite per step; the tests' pytest views of those same
# cases (test_conformance, test_benchmark_case) are not run again, and the workloads'
# pytest-benchmark views run once each, untimed (--benchmark-disable): what they add is the
# adapter's CUDA path. clean_exit cases (amp, profiler) run 5 fresh processes instead of 20.
#
# OUT_DIR gets gpu-tests.log, gpu-tests.xml, gpu-run-<suite>.log, summary.txt (each step's
# time and exit status, then each run's table) and runs/<machine>/<time>-quick.json (one per
# suite: the GPU reference runs).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-check.sh OUT_DIR [--dry-run]}
dry=${2:-}
mkdir -p "$out"
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# LIMITS: the wheel install, the versions of numpy and scipy, require-cuda, the tests, each
# suite with CUDA cases, then the summaries of the runs
LIMIT_WHEELS=20
LIMIT_VERSIONS=10
LIMIT_REQUIRE=20
LIMIT_TESTS=120
SUITE_LIMITS="amp:120 profiler:60 telemetry:25 rpc:40 ddp_rpc:45"
LIMIT_SUMMARY=30
params_of() {  # what a suite's run sets besides the profile
  case $1 in amp|profiler) echo "--param trials=5" ;; esac
}
# one test process: pytest-xdist, which `make test` runs its two with, is not on the GPU
# image (and its plugins are not loaded where it is installed)
TEST_SELECTION=(-m gpu -k "not test_conformance and not test_benchmark_case"
                --benchmark-disable -p no:xdist -p no:xdist.looponfail)
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
    timeout $LIMIT_VERSIONS $image harness.dependencies || exit 2
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

steps=()  # "name seconds status" of each step, for the summary
step() {  # step NAME LIMIT COMMAND...: run COMMAND under LIMIT seconds, timed
  local name=$1 limit=$2 t0=$SECONDS st
  shift 2
  timeout "$limit" "$@"
  st=$?
  steps+=("$name $((SECONDS - t0)) s (limit $limit s): exit $st")
  return $st
}
step versions $LIMIT_VERSIONS $PY -m harness.dependencies || exit 2
step require-cuda $LIMIT_REQUIRE $bench require-cuda || exit 2
status=0
echo "== gpu-marked tests"
step tests $LIMIT_TESTS $PY -m pytest "${TEST_SELECTION[@]}" -q -p no:cacheprovider \
  -o addopts="-ra" --junitxml="$out/gpu-tests.xml" --timeout=60 \
  > >(tee "$out/gpu-tests.log") 2>&1 || status=1
for entry in $SUITE_LIMITS; do
  suite=${entry%%:*}
  echo "== CUDA cases of $suite, quick profile (limit ${entry##*:} s)"
  step "run $suite" "${entry##*:}" $bench run --suite "$suite" --device cuda --profile quick \
    $(params_of "$suite") --out "$out/runs" > >(tee "$out/gpu-run-$suite.log") 2>&1 || status=1
done
printf '%s\n' "${steps[@]}" > "$out/summary.txt"
runs=("$out"/runs/*/*.json)
if [ -f "${runs[0]}" ]; then
  timeout $LIMIT_SUMMARY bash -c 'for run; do '"$bench"' show "$run"; done' _ "${runs[@]}" \
    >> "$out/summary.txt" 2>&1
fi
echo "gpu-check: exit $status; runs: $(ls "$out"/runs/*/*.json 2>/dev/null | wc -l)"
exit $status
