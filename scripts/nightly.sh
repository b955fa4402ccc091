#!/usr/bin/env bash
# The nightly job: full profile of every suite, asv on this commit, the dashboards, and a
# regression gate against the previous nightly run of this machine.
#
#   scripts/nightly.sh [release-bench run options, e.g. --device cuda]
#
# Exit status: 0 all well; 1 when the run found anything unexpected under expectations.toml
# (a new failure, a failure other than a known defect's, or a known defect that no longer
# shows: `run`'s own exit status), when compare found a regression against the previous
# nightly run, or when asv marked a benchmark slower (the dashboards are still published).
# A known defect that behaves as its entry says keeps the job green, so red means news.
# Uses .venv (built by `make`) unless BIN points elsewhere, e.g. a GPU runner with its own
# torch.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
[ -x "$BIN/release-bench" ] || make .venv/.installed || exit 2
rb="$BIN/release-bench"
commit=$(git rev-parse HEAD)
machine=$($rb asv-machine) || exit 2
runs="results/runs/$machine"
previous=$(ls "$runs"/*-full.json 2>/dev/null | tail -1)
status=0

echo "== full profile on $machine at $commit (judged by expectations.toml)"
$rb run --profile full "$@" || status=1
latest=$(ls "$runs"/*-full.json | tail -1)

echo "== asv (existing environment, results filed under $commit)"
"$BIN/asv" run --machine "$machine" --set-commit-hash "$commit" --launch-method spawn \
  --show-stderr || status=1
last_asv=results/asv/nightly-last-commit
if [ -s "$last_asv" ] && [ "$(cat "$last_asv")" != "$commit" ]; then
  "$BIN/asv" compare --machine "$machine" --factor 1.1 --split "$(cat "$last_asv")" "$commit" \
    | tee results/asv/nightly-compare.txt
  if grep -qE '^\| \+ ' results/asv/nightly-compare.txt; then
    echo "asv: PERFORMANCE DECREASED since $(cat "$last_asv")"; status=1
  fi
fi
echo "$commit" > "$last_asv"

echo "== dashboards"
$rb asv-publish
$rb report
if [ -n "$previous" ]; then
  echo "== regression gate: $previous -> $latest"
  # judged against the machine's history and calibration: a regression must be past its
  # tolerance and significant; inconclusive figures are listed, not failures
  $rb compare "$previous" "$latest" --history "$(dirname "$latest")" \
    --json results/html/compare.json || status=1
fi
exit $status
