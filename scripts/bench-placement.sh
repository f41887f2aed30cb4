#!/bin/bash
# bench-placement.sh: the verbs shim's rate against the engine's, however the threads fall
# (issue 37): unmodified perftest through scripts/uroce-run against uroce-perf over memif,
# ROUNDS rounds (default 5), each running every figure once, alternating; as a user starts them
# (no taskset, no nice) and pinned (server on CPU 0, client on CPU 1). Figures: 64 B WRITE
# message rate (ib_write_bw, uroce-perf), 1 MiB WRITE bandwidth (the same two), 64 B SEND
# (ib_send_bw, uroce-perf --test send) and 64 B READ (ib_read_bw, uroce-perf --test read) message
# rates, each shim figure over the uroce-perf figure of its round.
# Prints one markdown table: each figure's rounds, each round's ratio, and how many rounds are at
# 0.80 or more.
#
#   scripts/bench-placement.sh [BUILD_DIR]   (default build-bench, a release build made here if
#                                           missing; needs root; about 12 minutes)
# Environment: ROUNDS (default 5), MSGS (default 2000000 64 B messages), BIG (default 3000 1 MiB
# messages).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh  # bench_build, need_shim_bench, wait_memif, wait_tcp, cpu_line, bench_log, track, on, ratio
BUILD=${1:-build-bench}
bench_build "$BUILD"
need_shim_bench "$BUILD"  # PERF, RUN, UROCE_VERBS_LIB
ROUNDS=${ROUNDS:-5} MSGS=${MSGS:-2000000} BIG=${BIG:-3000}
SRV_CFG=config/memif-server.conf CLI_CFG=config/memif-client.conf
SRV_DEV=uroce-memif-s CLI_DEV=uroce-memif-c

bench_log bench-placement

# pt TOOL SIZE MSGS -> the perftest client's figure: Mpps at 64 B, Gbit/s at 1 MiB
echo 19800 > "$LOG/port"
pt() {
  local PORT tool=$1 size=$2 n=$3 extra=""
  PORT=$(( $(cat "$LOG/port") + 1 ))
  echo $PORT > "$LOG/port"
  [ "$size" -gt 65536 ] && extra="--report_gbits"
  on srv $RUN --config $SRV_CFG -- "$tool" -d $SRV_DEV -p $PORT -F -s "$size" -n "$n" $extra > "$LOG/ssrv" 2>&1 &
  track $!
  local srv=$!
  wait_memif && wait_tcp $PORT 300 || fail "$LOG/ssrv"
  timeout 300 bash -c "$(declare -f on); PLACE=$PLACE on cli $RUN --config $CLI_CFG -- $tool -d $CLI_DEV -p $PORT -F -s $size -n $n $extra 127.0.0.1" \
    > "$LOG/scli" 2>&1 || { echo "$tool -s $size failed:" >&2; fail "$LOG/scli" "$LOG/ssrv"; }
  timeout 20 tail --pid=$srv -f /dev/null || kill $srv 2>/dev/null || true
  grep -E "^ *[0-9]+ +[0-9]+ +[0-9.]+" "$LOG/scli" | tail -1 | awk -v big="$extra" '{print big ? $4 : $5}'
}
# perf SIZE MSGS [TEST] -> uroce-perf's figure (TEST default write): Mpps at 64 B, Gbit/s at 1 MiB
perf() {
  local opts=(--test "${3:-write}" --mode bw -s "$1" -n "$2" --timeout 120)
  on srv "$PERF" --config $SRV_CFG "${opts[@]}" > "$LOG/psrv" 2>&1 &
  track $!
  local srv=$!
  wait_memif || fail "$LOG/psrv"
  on cli "$PERF" --config $CLI_CFG "${opts[@]}" 127.0.0.1 > "$LOG/pcli" 2>&1 || fail "$LOG/pcli" "$LOG/psrv"
  wait $srv || fail "$LOG/psrv"
  grep -E "^ $1 " "$LOG/pcli" | awk -v s="$1" '{print (s > 65536 ? $4 : $5)}'
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(cpu_line), memif, $ROUNDS rounds alternating, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| placement | figure | uroce-perf rounds | shim rounds | shim / uroce-perf per round | rounds >= 0.80 |"
echo "|---|---|---|---|---|---:|"
for PLACE in user pinned; do
  declare -A P=() S=()
  for _ in $(seq "$ROUNDS"); do
    P[w64]="${P[w64]:-} $(perf 64 "$MSGS")"
    P[w1m]="${P[w1m]:-} $(perf 1048576 "$BIG")"
    P[s64]="${P[s64]:-} $(perf 64 "$MSGS" send)"
    P[r64]="${P[r64]:-} $(perf 64 "$MSGS" read)"
    S[w64]="${S[w64]:-} $(pt ib_write_bw 64 "$MSGS")"
    S[w1m]="${S[w1m]:-} $(pt ib_write_bw 1048576 "$BIG")"
    S[s64]="${S[s64]:-} $(pt ib_send_bw 64 "$MSGS")"
    S[r64]="${S[r64]:-} $(pt ib_read_bw 64 "$MSGS")"
  done
  label=$([ $PLACE = pinned ] && echo "pinned (server CPU 0, client CPU 1)" || echo "as a user starts them")
  for k in w64 w1m s64 r64; do
    case $k in
      w64) name="64 B WRITE [Mpps]: ib_write_bw" ;; w1m) name="1 MiB WRITE [Gbit/s]: ib_write_bw" ;;
      s64) name="64 B SEND [Mpps]: ib_send_bw" ;; r64) name="64 B READ [Mpps]: ib_read_bw" ;;
    esac
    read -ra pa <<< "${P[$k]}"; read -ra sa <<< "${S[$k]}"
    rs="" ok=0
    for i in "${!pa[@]}"; do
      r=$(ratio "${sa[$i]}" "${pa[$i]}"); rs="$rs $r"
      awk -v r="$r" 'BEGIN { exit !(r >= 0.80) }' && ok=$((ok + 1))
    done
    echo "| $label | $name | ${P[$k]} | ${S[$k]} |$rs | $ok of ${#pa[@]} |"
  done
done
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
