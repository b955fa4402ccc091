#!/usr/bin/env bash
# The nightly job: tonight's torch build judged against last night's on this machine
# (`release-bench nightly`, docs/guide.md#nightly).
#
#   scripts/nightly.sh [BUILD] [release-bench nightly options, e.g. --suite amp]
#
# BUILD is tonight's torch: a release (its environment built in .envs/ with uv where missing;
# last night's stays for the gate, and uv shares their files), a venv folder or a Python;
# default: the newest release the package registry serves. The nightly keeps its builds
# ledger, asv's results over builds, last night's build and its pages in NIGHTLY_DIR
# (default .nightly), and its night records in results/nightly/<machine>/.
#
# Exit status: `release-bench nightly`'s: 0 green; 1 red, only for news: a result
# expectations.toml does not expect, a regression the gate (ab of last night's build against
# tonight's) shows, or a part that could not run; 2 bad input. Inconclusive figures, asv's
# marks and the events since last night are listed on the page, not failures.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
[ -x "$BIN/release-bench" ] || make .venv/.installed || exit 2
build=${1:-}
if [ -z "$build" ] || [[ "$build" == -* ]]; then
  build=$("$BIN/python" -c 'from harness.releases import envs; print(envs.registry_versions()[0])') \
    || { echo "nightly.sh: the package registry lists no torch release" >&2; exit 2; }
else
  shift
fi
echo "== nightly: torch $build"
exec "$BIN/release-bench" nightly "$build" --dir "${NIGHTLY_DIR:-.nightly}" "$@"
