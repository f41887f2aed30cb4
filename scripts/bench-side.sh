#!/bin/bash
# bench-side.sh: the engine and unmodified perftest through the verbs shim, side by side, in one
# run over memif (two processes, each pinned to one core: server on CPU 0, client on CPU 1).
# Prints one markdown table: each figure and its ratio to its reference.
#   raw       uroce-pktgen's 64 B rate (a minimal DPDK generator/counter)      reference for uroce-perf
#   uroce-perf 64 B and 1 MiB WRITE rate, write latency (8 B)                  reference for the shim
#   perftest through scripts/uroce-run: ib_write_bw 64 B and 1 MiB, ib_send_lat, ib_write_lat,
#             ib_read_lat (8 B, typical and p99)
# Then the engine bench (both engines in one process) and the ICRC bench, with the CPU's features.
#
#   scripts/bench-side.sh [BUILD_DIR]     (default build-bench, a release build made here if
#                                         missing; needs root; about 5 minutes)
# Environment: REPEAT (default 3; the best of REPEAT runs is kept for each rate, the lowest
# typical latency for each latency: this machine is shared), NICE (default -20: every measured
# process runs at this priority, so background work on a shared machine takes little from it), SKIP_MICRO=1 skips the engine and
# ICRC benches, PERFTEST_OPTS (extra options for every perftest command, e.g. "-m 4096").
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh  # bench_build, wait_memif, wait_tcp, cpu_line, bench_log, track
BUILD=${1:-build-bench}
bench_build "$BUILD"
PERF=$BUILD/bench/uroce-perf
GEN=$BUILD/bench/uroce-pktgen
RUN=scripts/uroce-run
REPEAT=${REPEAT:-3}
SRV_CFG=config/memif-server.conf CLI_CFG=config/memif-client.conf
SRV_DEV=uroce-memif-s CLI_DEV=uroce-memif-c
SRV_CPU=0 CLI_CPU=1
NICE=${NICE:--20}
[ -x "$PERF" ] && [ -x "$GEN" ] || { echo "build first: $PERF, $GEN missing" >&2; exit 1; }
[ -f "$BUILD/verbs_shim/liburoce-verbs.so" ] || { echo "build first: liburoce-verbs.so missing" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 1; }
command -v ib_write_bw > /dev/null || { echo "perftest is not installed (scripts/install-deps.sh)" >&2; exit 1; }
export UROCE_VERBS_LIB=$BUILD/verbs_shim/liburoce-verbs.so

bench_log bench-side
fail() {  # fail FILE... : print the logs, stop everything
  cat "$@" >&2
  while read -r p; do kill "$p" 2>/dev/null || true; done < "$LOG/pids"
  exit 1
}
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (b > a ? b : a) }'; }
lowest() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == 0 || b < a ? b : a) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f%%", 100 * a / b; else print "-" }'; }

raw_rate() {
  nice -n $NICE taskset -c $SRV_CPU "$GEN" --config $SRV_CFG rx -t 3 > "$LOG/rx" 2>&1 &
  track $!
  local rx=$!
  wait_memif
  nice -n $NICE taskset -c $CLI_CPU "$GEN" --config $CLI_CFG tx -t 3 -s 64 > "$LOG/tx" 2>&1
  wait $rx || true
  sed -n 's/.*rx frames=.* Mpps=\([0-9.]*\).*/\1/p' "$LOG/rx"
}

# perf MODE SIZE ITERS -> the client's result line
perf() {
  local opts=(--test write --mode "$1" -s "$2" -n "$3" --timeout 90)
  nice -n $NICE taskset -c $SRV_CPU "$PERF" --config $SRV_CFG "${opts[@]}" > "$LOG/psrv" 2>&1 &
  track $!
  local srv=$!
  wait_memif
  nice -n $NICE taskset -c $CLI_CPU "$PERF" --config $CLI_CFG "${opts[@]}" 127.0.0.1 > "$LOG/pcli" 2>&1 || fail "$LOG/pcli" "$LOG/psrv"
  wait $srv || fail "$LOG/psrv"
  grep -E "^ $2 " "$LOG/pcli"
}

PORT=19600
# pt TOOL OPTS... -> the client's result line (perftest's format)
pt() {
  local tool=$1; shift
  PORT=$((PORT + 1))
  # shellcheck disable=SC2086
  nice -n $NICE taskset -c $SRV_CPU $RUN --config $SRV_CFG -- "$tool" -d $SRV_DEV -p $PORT -F "$@" ${PERFTEST_OPTS:-} > "$LOG/ssrv" 2>&1 &
  track $!
  local srv=$!
  wait_memif && wait_tcp $PORT || fail "$LOG/ssrv"
  # shellcheck disable=SC2086
  timeout 120 nice -n $NICE taskset -c $CLI_CPU $RUN --config $CLI_CFG -- "$tool" -d $CLI_DEV -p $PORT -F "$@" ${PERFTEST_OPTS:-} 127.0.0.1 > "$LOG/scli" 2>&1 \
    || { echo "$tool $* failed:" >&2; fail "$LOG/scli" "$LOG/ssrv"; }
  timeout 20 tail --pid=$srv -f /dev/null || kill $srv 2>/dev/null || true
  grep -E "^ *[0-9]+ +[0-9]+ +[0-9.]+" "$LOG/scli" | tail -1
}

raw=0 p64=0 p1m=0 plat=0 plat99=0 s64=0 s1m=0 sl=0 sl99=0 wl=0 wl99=0 rl=0 rl99=0
for _ in $(seq "$REPEAT"); do
  raw=$(best $raw "$(raw_rate)")
  p64=$(best $p64 "$(perf bw 64 2000000 | awk '{print $5}')")
  p1m=$(best $p1m "$(perf bw 1048576 3000 | awk '{print $4}')")
  l=$(perf lat 8 100000); t=$(echo "$l" | awk '{print $5}')
  if [ "$plat" = 0 ] || awk -v a="$t" -v b="$plat" 'BEGIN{exit !(a < b)}'; then plat=$t; plat99=$(echo "$l" | awk '{print $8}'); fi
  s64=$(best $s64 "$(pt ib_write_bw -s 64 -n 2000000 | awk '{print $5}')")
  s1m=$(best $s1m "$(pt ib_write_bw -s 1048576 -n 3000 --report_gbits | awk '{print $4}')")
  for tool in send write read; do
    l=$(pt ib_${tool}_lat -s 8 -n 100000); t=$(echo "$l" | awk '{print $5}'); p=$(echo "$l" | awk '{print $8}')
    case $tool in
      send) if [ "$sl" = 0 ] || awk -v a="$t" -v b="$sl" 'BEGIN{exit !(a < b)}'; then sl=$t; sl99=$p; fi ;;
      write) if [ "$wl" = 0 ] || awk -v a="$t" -v b="$wl" 'BEGIN{exit !(a < b)}'; then wl=$t; wl99=$p; fi ;;
      read) if [ "$rl" = 0 ] || awk -v a="$t" -v b="$rl" 'BEGIN{exit !(a < b)}'; then rl=$t; rl99=$p; fi ;;
    esac
  done
done

echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(cpu_line), memif, server on CPU $SRV_CPU, client on CPU $CLI_CPU"
echo "# best of $REPEAT, nice $NICE; shim progress: ${UROCE_PROGRESS:-config default}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| figure | value | reference | ratio |"
echo "|---|---|---|---|"
echo "| raw DPDK 64 B (uroce-pktgen) | $raw Mpps | | |"
echo "| uroce-perf 64 B WRITE | $p64 Mpps | raw | $(ratio $p64 $raw) |"
echo "| uroce-perf 1 MiB WRITE | $p1m Gbit/s | | |"
echo "| uroce-perf WRITE latency 8 B, typical (p99) | $plat us ($plat99) | | |"
echo "| ib_write_bw 64 B through the shim | $s64 Mpps | uroce-perf 64 B | $(ratio $s64 $p64) |"
echo "| ib_write_bw 1 MiB through the shim | $s1m Gbit/s | uroce-perf 1 MiB | $(ratio $s1m $p1m) |"
echo "| ib_send_lat 8 B, typical (p99) | $sl us ($sl99) | uroce-perf latency | $(ratio $sl $plat) |"
echo "| ib_write_lat 8 B, typical (p99) | $wl us ($wl99) | uroce-perf latency | $(ratio $wl $plat) |"
echo "| ib_read_lat 8 B, typical (p99) | $rl us ($rl99) | uroce-perf latency | $(ratio $rl $plat) |"

if [ "${SKIP_MICRO:-0}" != 1 ]; then
  echo
  UROCE_BENCH_CPU=$CLI_CPU nice -n $NICE bash scripts/bench-engine.sh
  echo
  nice -n $NICE bash scripts/bench-icrc.sh
fi
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
