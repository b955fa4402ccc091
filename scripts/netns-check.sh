#!/usr/bin/env bash
# Ground truth for runs across hosts: two network namespaces joined by a veth pair, one
# `release-bench multihost` node in each, the rpc round trip and the DDP+RPC reference check
# run over the link unshaped and then shaped by tc tbf to RATE_MBIT each way; then
# suites/rpc/shaped_link.py checks the round trips against the rate.
#
# The namespaces get addresses from 198.18.0.0/15 (reserved for benchmarking), which exist only
# inside them: nothing is sent anywhere else. The namespaces, and with them the veth pair and
# its qdiscs, are removed on the way out, failed or not.
#
#   scripts/netns-check.sh            # RATE_MBIT=100, results under results/scratch/netns
#   DDP_MODE=inside scripts/netns-check.sh   # one DDP+RPC variant of three
# Exit status: 0 passed, 1 a check failed, 2 a run failed, 77 skipped (not root, no ip netns).
set -euo pipefail
cd "$(dirname "$0")/.."

RATE_MBIT=${RATE_MBIT:-100}
OUT=${OUT:-results/scratch/netns}
BIN=${BIN:-.venv/bin}
PORT=${PORT:-29455}
# 64 KiB to 4 MiB for the slope; few samples each: a 4 MiB round trip takes 0.7 s at 100 Mbit/s
SIZES=${SIZES:-[4,65536,262144,1048576,4194304]}
DELAY_MS=${DELAY_MS:-1}
MIN_SAMPLES=${MIN_SAMPLES:-12}
# the DDP+RPC variants run across the link (none, outside, inside; default: all three)
DDP_MODE=${DDP_MODE:-}
case "$DDP_MODE" in
  ""|none|outside|inside) ;;
  *) echo "netns-check: DDP_MODE must be none, outside or inside, not '$DDP_MODE'" >&2; exit 2 ;;
esac

skip() { echo "netns-check: skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to make network namespaces"
command -v ip >/dev/null && command -v tc >/dev/null || skip "needs ip and tc (iproute2)"

tag=$$
A=rb-a-$tag B=rb-b-$tag VA=rbva$tag VB=rbvb$tag
ADDR_A=198.18.0.1 ADDR_B=198.18.0.2

cleanup() {
  for ns in "$A" "$B"; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
}
trap cleanup EXIT
ip netns add "$A" 2>/dev/null || skip "ip netns add is refused here"
ip netns add "$B"
ip link add "$VA" netns "$A" type veth peer name "$VB" netns "$B"
ip -n "$A" addr add "$ADDR_A/30" dev "$VA"
ip -n "$B" addr add "$ADDR_B/30" dev "$VB"
for pair in "$A $VA" "$B $VB"; do
  set -- $pair
  ip -n "$1" link set lo up
  ip -n "$1" link set "$2" up
done

# one run across the namespaces of the rpc round trip (the paths checked: the TCP floor,
# TensorPipe forced to uv and Gloo) and the DDP+RPC reference check (one pair of node agents
# for both); prints the folder of the record node 0 wrote
run_pair() {
  local label=$1 dir="$OUT/$1"
  rm -rf "$dir"; mkdir -p "$dir"
  local args=(-- --suite rpc --suite ddp_rpc --only round_trip --only matches_reference
              --param "sizes=$SIZES" --param "min_samples=$MIN_SAMPLES"
              --param paths=gloo,tp_uv --no-telemetry
              --out "$dir/runs" ${DDP_MODE:+--param "ddp=$DDP_MODE"})
  ip netns exec "$B" "$BIN/release-bench" multihost --nnodes 2 --iface "$VB" \
    --rdzv-endpoint "$ADDR_A:$PORT" "${args[@]}" >"$dir/b.log" 2>&1 &
  local b=$!
  local status=0
  ip netns exec "$A" "$BIN/release-bench" multihost --nnodes 2 --iface "$VA" \
    --rdzv-endpoint "$ADDR_A:$PORT" "${args[@]}" >"$dir/a.log" 2>&1 || status=$?
  wait "$b" || status=$?
  if [ "$status" != 0 ]; then
    echo "netns-check: the $label run failed (status $status); logs in $dir" >&2
    tail -n 25 "$dir/a.log" "$dir/b.log" >&2
    exit 2
  fi
  echo "$dir/runs"
}

echo "netns-check: $A ($ADDR_A) <-> $B ($ADDR_B) over $VA/$VB; unshaped run"
unshaped=$(run_pair unshaped)
echo "netns-check: shaping each direction to $RATE_MBIT Mbit/s (tbf)"
for pair in "$A $VA" "$B $VB"; do
  set -- $pair
  # a queue that holds a whole 4 MiB message: the rate, not drops, sets the pace
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "${RATE_MBIT}mbit" burst 16kb limit 16mb
done
shaped=$(run_pair shaped)
delayed=()
# a known delay, where the kernel has netem (these machines' has not)
if ip netns exec "$A" tc qdisc replace dev "$VA" root netem delay "${DELAY_MS}ms" 2>/dev/null \
   && ip netns exec "$B" tc qdisc replace dev "$VB" root netem delay "${DELAY_MS}ms"; then
  echo "netns-check: ${DELAY_MS} ms delay each way (netem), no rate limit"
  SIZES=[4,65536]
  delayed=(--delayed "$(run_pair delayed)" --delay-ms "$DELAY_MS")
else
  echo "netns-check: this kernel has no netem qdisc: the delay check is skipped"
fi
"$BIN/python" -m suites.rpc.shaped_link --rate-mbit "$RATE_MBIT" "$unshaped" "$shaped" \
  "${delayed[@]}" --json "$OUT/check.json"
