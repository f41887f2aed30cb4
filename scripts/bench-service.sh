#!/bin/bash
# bench-service.sh: the cost of the uroce service (docs/service.md), in one run: uroce-perf's 64 B
# RDMA WRITE message rate and 1 MiB WRITE bandwidth over memif, its server side (a) with a link of
# its own (embedded), then (b) attached to uroced, which owns the same memif link, the attached
# process driving the port itself (port/service/pump.hpp), then (c) attached with the daemon
# polling the port (service_drive = off: as on links a secondary cannot poll, af_xdp and
# af_packet); the client side is embedded throughout. Alternates a, b and c REPEAT times and keeps
# each one's best (this machine is shared). Prints a markdown table with the ratios to a.
#
#   scripts/bench-service.sh [BUILD_DIR]     (default ./build; needs root and 2 MB hugepages; ~2 minutes)
# Environment: N64 / N1M (iterations), REPEAT (default 3), PIN=1: the embedded sides as their
# configs place them (-l 0, -l 1) and uroced on lcore 0 too; default: everything where the
# scheduler puts it (as a user runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PERF=$BUILD/bench/uroce-perf
UROCED=$BUILD/tools/uroced/uroced
N64=${N64:-1000000}
N1M=${N1M:-2000}
REPEAT=${REPEAT:-3}
PIN=${PIN:-0}
[ -x "$PERF" ] && [ -x "$UROCED" ] || { echo "build first: $PERF, $UROCED missing" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 1; }

TMPD=$(mktemp -d /tmp/uroce-bench-service.XXXXXX)
PIDS=()
MOUNTED=0
PAGES=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMPD" /dev/hugepages/uroced-uroce-memif-s* /var/run/dpdk/uroced-uroce-memif-s
  [ $MOUNTED = 1 ] && umount /dev/hugepages
  echo "$PAGES" > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
}
trap cleanup EXIT INT TERM
grep -q hugetlbfs /proc/mounts || { mkdir -p /dev/hugepages; mount -t hugetlbfs nodev /dev/hugepages; MOUNTED=1; }
echo $((PAGES + 300)) > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages

# The configs: memif's as they are (PIN=1), or with the lcores where the scheduler puts them.
for s in server client; do
  if [ "$PIN" = 1 ]; then cp config/memif-$s.conf "$TMPD/$s.conf"
  else sed -E 's/^eal = -l [0-9]+ /eal = --lcores=0@(0-'"$(($(nproc) - 1))"') /' config/memif-$s.conf > "$TMPD/$s.conf"; fi
done
{ cat "$TMPD/server.conf"; echo "service_drive = off"; } > "$TMPD/server-nodrive.conf"

# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh  # wait_memif

# run MODE SIZE ITERS -> the client's result line
run() {
  local opts=(--test write -s "$2" -n "$3" --timeout 90) d=""
  if [ "$1" != embedded ]; then
    local dconf="$TMPD/server.conf"
    [ "$1" = polled ] && dconf="$TMPD/server-nodrive.conf"
    "$UROCED" --config "$dconf" > "$TMPD/uroced.log" 2>&1 & d=$!; PIDS+=($d)
    for _ in $(seq 200); do grep -q "uroced: serving" "$TMPD/uroced.log" && break; sleep 0.05; done
    grep -q "uroced: serving" "$TMPD/uroced.log" || { cat "$TMPD/uroced.log" >&2; exit 1; }
  fi
  "$PERF" --config "$TMPD/server.conf" "${opts[@]}" > "$TMPD/srv.log" 2>&1 & local srv=$!; PIDS+=($srv)
  wait_memif
  local rc=0 src=0
  "$PERF" --config "$TMPD/client.conf" "${opts[@]}" 127.0.0.1 > "$TMPD/cli.log" 2>&1 || rc=$?
  wait $srv || src=$?
  if [ -n "$d" ]; then kill "$d"; wait "$d" || true; fi
  if [ $rc != 0 ] || [ $src != 0 ]; then
    echo "uroce-perf failed ($1: client rc $rc, server rc $src):" >&2
    cat "$TMPD/cli.log" "$TMPD/srv.log" >&2
    [ -n "$d" ] && cat "$TMPD/uroced.log" >&2
    exit 1
  fi
  grep -q "data verification: OK" "$TMPD/cli.log" || { echo "verification failed" >&2; exit 1; }
  if [ "$1" != embedded ]; then grep -q "uroced slot" "$TMPD/srv.log" || { echo "the server did not attach" >&2; cat "$TMPD/srv.log" >&2; exit 1; }; fi
  # Who moved the frames: the daemon delivers few of them when the process drives, all when not.
  if [ "$1" != embedded ]; then
    local moved; moved=$(sed -n 's/.*frames delivered \([0-9]*\).*/\1/p' "$TMPD/uroced.log")
    if [ "$1" = service ] && [ "${moved:-0}" -gt $(($3 / 2)) ]; then echo "the server did not drive the port (daemon delivered $moved)" >&2; exit 1; fi
    if [ "$1" = polled ] && [ "${moved:-0}" -lt "$3" ]; then echo "the daemon did not poll (delivered $moved)" >&2; exit 1; fi
  fi
  grep -E "^ $2 " "$TMPD/cli.log"
}

best() { awk -v a="$1" -v b="$2" 'BEGIN { print (b > a ? b : a) }'; }
declare -A M G
MODES="embedded service polled"
for mode in $MODES; do M[$mode]=0; G[$mode]=0; done
for _ in $(seq "$REPEAT"); do
  for mode in $MODES; do
    M[$mode]=$(best "${M[$mode]}" "$(run $mode 64 "$N64" | awk '{print $5}')")
    G[$mode]=$(best "${G[$mode]}" "$(run $mode 1048576 "$N1M" | awk '{print $4}')")
  done
done
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $cpu, $(nproc) cores, $( [ "$PIN" = 1 ] && echo pinned || echo unpinned ), best of $REPEAT"
echo
echo "| uroce-perf server side | 64 B WRITE [Mpps] | 1 MiB WRITE [Gbit/s] |"
echo "|---|---|---|"
echo "| (a) embedded (a link of its own) | ${M[embedded]} | ${G[embedded]} |"
echo "| (b) attached to uroced, driving the port | ${M[service]} | ${G[service]} |"
echo "| (c) attached to uroced, the daemon polling (service_drive = off) | ${M[polled]} | ${G[polled]} |"
ratio() { awk -v m1="${M[embedded]}" -v m2="${M[$1]}" -v g1="${G[embedded]}" -v g2="${G[$1]}" -v t="$2" \
  'BEGIN { printf "| %s | %.0f%% | %.0f%% |\n", t, 100 * m2 / m1, 100 * g2 / g1 }'; }
ratio service "b / a"
ratio polled "c / a"
