#!/bin/bash
# bench-capture.sh: what the port's capture (config key capture) and fault stage cost, in one run
# over memif: uroce-perf's 64 B WRITE message rate without capture, with both ends capturing
# (pcapng, default snap length) and, for reference, with an idle fault stage (fault_drop = 0
# is off; fault_drop = 0.000001 turns the stage on for every frame), runs interleaved.
#   scripts/bench-capture.sh [BUILD_DIR]   (default build-bench, a release build; root; ~3 min)
# Environment: REPEAT (default 3, the best of each kept), N (messages per run, default 1000000),
# CAPDIR (where the captures go, default /tmp; removed after each run).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-bench}
PERF=$BUILD/bench/uroce-perf
REPEAT=${REPEAT:-3} N=${N:-1000000} CAPDIR=${CAPDIR:-/tmp}
[ -x "$PERF" ] || { echo "build first: $PERF missing" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 1; }
LOG=$(mktemp -d /tmp/uroce-bench-capture.XXXXXX)
cleanup() {
  [ -f "$LOG/pids" ] && while read -r p; do kill "$p" 2>/dev/null || true; done < "$LOG/pids"
  wait 2>/dev/null || true
  rm -rf "$LOG" "$CAPDIR"/uroce-bench-capture-[sc].pcapng
}
trap cleanup EXIT INT TERM
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh  # wait_memif
# run NAME EXTRA_KEYS -> Mpps of the client's 64 B WRITE run with EXTRA_KEYS in both configs
run() {
  { cat config/memif-server.conf; printf '%b\n' "${2//@/s}"; } > "$LOG/s.conf"
  { cat config/memif-client.conf; printf '%b\n' "${2//@/c}"; } > "$LOG/c.conf"
  local opts=(--test write -s 64 -n "$N" --timeout 120 --stats)
  nice -n -20 taskset -c 0 "$PERF" --config "$LOG/s.conf" "${opts[@]}" > "$LOG/srv" 2>&1 &
  echo $! >> "$LOG/pids"
  local srv=$!
  wait_memif
  nice -n -20 taskset -c 1 "$PERF" --config "$LOG/c.conf" "${opts[@]}" 127.0.0.1 > "$LOG/cli" 2>&1 || { cat "$LOG/cli" "$LOG/srv" >&2; exit 1; }
  wait $srv || { cat "$LOG/srv" >&2; exit 1; }
  grep -h -o "capture_frames=[0-9]* capture_skipped=[0-9]*" "$LOG/cli" "$LOG/srv" | tr '\n' ' ' >> "$LOG/$1.frames"
  echo >> "$LOG/$1.frames"
  rm -f "$CAPDIR"/uroce-bench-capture-[sc].pcapng
  grep -E "^ 64 " "$LOG/cli" | awk '{print $5}'
}
best() { awk -v a="$1" -v b="$2" 'BEGIN{print (b > a ? b : a)}'; }
off=0 cap=0 flt=0
for _ in $(seq "$REPEAT"); do
  off=$(best $off "$(run off "")")
  cap=$(best $cap "$(run cap "capture = $CAPDIR/uroce-bench-capture-@.pcapng")")
  flt=$(best $flt "$(run flt "fault_drop = 0.000001")")
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a / b}'; }
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1) ($(nproc) cores), memif, 64 B WRITE, $N messages, best of $REPEAT, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| run | Mpps | ratio to no capture |"
echo "|---|---|---|"
echo "| no capture | $off | 1.00 |"
echo "| capture at both ends (pcapng, default snap) | $cap | $(ratio $cap $off) |"
echo "| fault stage on (fault_drop = 0.000001) | $flt | $(ratio $flt $off) |"
echo "# frames captured (client, server) per capture run: $(tr '\n' ';' < "$LOG/cap.frames")"
