#!/usr/bin/env bash
# The nightly rehearsed over real releases: consecutive torch releases as nights, then the last
# release a second night (the same build two nights running must be green, with no
# regression), then that release with a planted slowdown (tests/planted, matmul=0.1: torch's
# matmuls and convolutions 10% slower), whose night must be red, with asv's step detection
# placing the step at it. Each night: fork_wait's and profiler's conformance and release-notes
# examples, the gate on amp/gemm_ladder (3 swapped pairs of duets), asv timing the matmul
# workload over builds. Records go to results/nightly/rehearsal/<machine>/ (small JSON).
#
#   scripts/nightly-rehearsal.sh [RELEASE ...]   (default: 2.9.1 2.10.0 ... 2.14.0)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
[ -x "$BIN/release-bench" ] || make .venv/.installed || exit 2
releases=("$@")
[ ${#releases[@]} -gt 0 ] || releases=(2.9.1 2.10.0 2.11.0 2.12.0 2.13.0 2.14.0)
last=${releases[-1]}
dir=.nightly/rehearsal
[ ! -e "$dir" ] || { echo "nightly-rehearsal.sh: $dir exists; remove it to start afresh" >&2; exit 2; }
for v in "${releases[@]}"; do
  "$BIN/release-bench" env create "$v" --registry-builds 2>/dev/null \
    || [ -f ".envs/torch-$v/release-bench-env.json" ] || exit 2
done
planted=.nightly/planted/$last-planted-matmul-0.1
".envs/torch-$last/bin/python" tests/planted/wrap.py "$planted" "matmul=0.1" >/dev/null || exit 2
exec "$BIN/release-bench" nightly --rehearse "${releases[@]}" "$last" "$planted" --dir "$dir" \
  --suite fork_wait --suite profiler --gate amp/gemm_ladder --rounds 5 \
  --asv-bench '^amp\.asv_bench\.MatmulTime'
