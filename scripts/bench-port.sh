#!/bin/bash
# bench-port.sh: on each link (memif, af_xdp, af_packet), in one run: the raw 64 B packet rate
# of a minimal DPDK generator/counter (uroce-pktgen tx -> rx), then uroce-perf's 64 B RDMA
# WRITE message rate and its 1 MiB WRITE bandwidth, one lcore per side, the application thread
# driving the engine (one busy poller per process). Prints a markdown table.
#
#   scripts/bench-port.sh [BUILD_DIR]       (default ./build; needs root; ~1-2 minutes)
# Environment: LINKS="memif af_xdp af_packet", SECS (raw run length), N64 / N1M (iterations),
# REPEAT (default 3): each measurement runs REPEAT times and the best is kept, the same for the
# raw rate and for uroce (this machine is shared: other processes take whole cores at times).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PERF=$BUILD/bench/uroce-perf
GEN=$BUILD/bench/uroce-pktgen
LINKS=${LINKS:-"memif af_xdp af_packet"}
SECS=${SECS:-3}
REPEAT=${REPEAT:-3}
[ -x "$PERF" ] && [ -x "$GEN" ] || { echo "build first: $PERF, $GEN missing" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 1; }

PIDS=()
NETNS=0
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ $NETNS = 1 ] && scripts/netns-pair down
  rm -f /tmp/uroce-bench-*.log
}
trap cleanup EXIT INT TERM

# $1 link -> sets SRV_CFG CLI_CFG SRV_NS CLI_NS PEER N64 N1M
setup_link() {
  case $1 in
    memif) SRV_CFG=config/memif-server.conf CLI_CFG=config/memif-client.conf SRV_NS=() CLI_NS=() PEER=127.0.0.1
           N64=${N64:-2000000} N1M=${N1M:-3000} ;;
    af_xdp) SRV_CFG=config/veth-b-xdp.conf CLI_CFG=config/veth-a-xdp.conf PEER=198.18.1.2
           SRV_NS=(ip netns exec uroce-b) CLI_NS=(ip netns exec uroce-a) N64=${N64:-300000} N1M=${N1M:-300} ;;
    af_packet) SRV_CFG=config/veth-b.conf CLI_CFG=config/veth-a.conf PEER=198.18.0.2
           SRV_NS=(ip netns exec uroce-b) CLI_NS=(ip netns exec uroce-a) N64=${N64:-300000} N1M=${N1M:-300} ;;
  esac
  if [ "$1" != memif ] && [ $NETNS = 0 ]; then scripts/netns-pair up; NETNS=1; fi
}

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh  # wait_memif

raw_rate() {
  "${SRV_NS[@]}" "$GEN" --config "$SRV_CFG" rx -t "$SECS" > /tmp/uroce-bench-rx.log 2>&1 & PIDS+=($!)
  local rx=$!
  [ "$1" = memif ] && wait_memif || sleep 1
  "${CLI_NS[@]}" "$GEN" --config "$CLI_CFG" tx -t "$SECS" -s 64 > /tmp/uroce-bench-tx.log 2>&1
  wait $rx || true
  sed -n 's/.*rx frames=.* Mpps=\([0-9.]*\).*/\1/p' /tmp/uroce-bench-rx.log
}

# perf_run link size iters -> prints the client's result line
perf_run() {
  local opts=(--test write -s "$2" -n "$3" --timeout 90)
  "${SRV_NS[@]}" "$PERF" --config "$SRV_CFG" "${opts[@]}" > /tmp/uroce-bench-srv.log 2>&1 & PIDS+=($!)
  local srv=$!
  [ "$1" = memif ] && wait_memif || sleep 1
  local rc=0 src=0
  "${CLI_NS[@]}" "$PERF" --config "$CLI_CFG" "${opts[@]}" "$PEER" > /tmp/uroce-bench-cli.log 2>&1 || rc=$?
  wait $srv || src=$?
  if [ $rc != 0 ] || [ $src != 0 ]; then
    echo "uroce-perf failed (client rc $rc, server rc $src):" >&2
    cat /tmp/uroce-bench-cli.log /tmp/uroce-bench-srv.log >&2
    exit 1
  fi
  grep -q "data verification: OK" /tmp/uroce-bench-cli.log || { echo "verification failed" >&2; exit 1; }
  grep -E "^ $2 " /tmp/uroce-bench-cli.log
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo
echo "| link | raw 64 B rx [Mpps] | uroce 64 B WRITE [Mpps] | % of raw | uroce 1 MiB WRITE [Gbit/s] | path MTU |"
echo "|---|---|---|---|---|---|"
for L in $LINKS; do
  setup_link "$L"
  raw=0 mpps=0 gbit=0
  for _ in $(seq "$REPEAT"); do
    raw=$(awk -v a="$raw" -v b="$(raw_rate "$L")" 'BEGIN { print (b > a ? b : a) }')
    r64=$(perf_run "$L" 64 "$N64")
    mpps=$(awk -v a="$mpps" -v b="$(echo "$r64" | awk '{print $5}')" 'BEGIN { print (b > a ? b : a) }')
    r1m=$(perf_run "$L" 1048576 "$N1M")
    gbit=$(awk -v a="$gbit" -v b="$(echo "$r1m" | awk '{print $4}')" 'BEGIN { print (b > a ? b : a) }')
  done
  mtu=$(sed -n 's/^mtu *= *\([0-9]*\).*/\1/p' "$CLI_CFG")
  pct=$(awk -v a="$mpps" -v b="$raw" 'BEGIN { if (b > 0) printf "%.0f%%", 100 * a / b; else print "-" }')
  echo "| $L | $raw | $mpps | $pct | $gbit | $mtu |"
  unset N64 N1M
done
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
