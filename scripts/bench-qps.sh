#!/bin/bash
# bench-qps.sh: the 64 B WRITE message rate over 1,024 QPs against one QP (issue 30), over memif,
# through unmodified perftest (`ib_write_bw -s 64 -q 1024` and `-q 1`, scripts/uroce-run) and
# with uroce-perf's equivalent (`--qps 1024`), in one run: ROUNDS rounds, each running every
# figure once, alternating, so that the machine's drift falls on all. Twice: as a user starts
# them (no taskset, no nice) and pinned (server on CPU 0, client on CPU 1). Prints one markdown
# table: each figure's rounds, its median and the median's ratio to the one-QP figure.
#
#   scripts/bench-qps.sh [BUILD_DIR]    (default build-bench, a release build made here if
#                                       missing; needs root; about 4 minutes)
# Environment: ROUNDS (default 3), QPS (default 1024), ONE_QP_MSGS (default 2000000: messages for
# one QP), PER_QP_MSGS (default 2000: messages per QP for QPS of them).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh  # bench_build, need_shim_bench, wait_memif, wait_tcp, cpu_line, bench_log, track, on, ratio
BUILD=${1:-build-bench}
bench_build "$BUILD"
need_shim_bench "$BUILD"  # PERF, RUN, UROCE_VERBS_LIB
ROUNDS=${ROUNDS:-3} QPS=${QPS:-1024} ONE_QP_MSGS=${ONE_QP_MSGS:-2000000} PER_QP_MSGS=${PER_QP_MSGS:-2000}
SRV_CFG=config/memif-server.conf CLI_CFG=config/memif-client.conf
SRV_DEV=uroce-memif-s CLI_DEV=uroce-memif-c

bench_log bench-qps
fail() { cat "$@" >&2; exit 1; }


# pt QPS MSGS -> ib_write_bw's MsgRate (Mpps); a TCP port of its own each time (the counter is
# in a file: pt runs in a command substitution's subshell)
echo 19700 > "$LOG/port"
pt() {
  local PORT
  PORT=$(( $(cat "$LOG/port") + 1 ))
  echo $PORT > "$LOG/port"
  on srv $RUN --config $SRV_CFG -- ib_write_bw -d $SRV_DEV -p $PORT -F -s 64 -q "$1" -n "$2" > "$LOG/ssrv" 2>&1 &
  track $!
  local srv=$!
  wait_memif && wait_tcp $PORT 300 || fail "$LOG/ssrv"
  timeout 300 bash -c "$(declare -f on); PLACE=$PLACE on cli $RUN --config $CLI_CFG -- ib_write_bw -d $CLI_DEV -p $PORT -F -s 64 -q $1 -n $2 127.0.0.1" \
    > "$LOG/scli" 2>&1 || { echo "ib_write_bw -q $1 failed:" >&2; fail "$LOG/scli" "$LOG/ssrv"; }
  timeout 20 tail --pid=$srv -f /dev/null || kill $srv 2>/dev/null || true
  grep -E "^ *[0-9]+ +[0-9]+ +[0-9.]+" "$LOG/scli" | tail -1 | awk '{print $5}'
}
# perf QPS MSGS -> uroce-perf's 64 B WRITE rate (Mpps)
perf() {
  local opts=(--test write --mode bw -s 64 --qps "$1" -n "$2" --timeout 120)
  on srv "$PERF" --config $SRV_CFG "${opts[@]}" > "$LOG/psrv" 2>&1 &
  track $!
  local srv=$!
  wait_memif || fail "$LOG/psrv"
  on cli "$PERF" --config $CLI_CFG "${opts[@]}" 127.0.0.1 > "$LOG/pcli" 2>&1 || fail "$LOG/pcli" "$LOG/psrv"
  wait $srv || fail "$LOG/psrv"
  grep -E "^ 64 " "$LOG/pcli" | awk '{print $5}'
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(cpu_line), memif, 64 B WRITE, $ROUNDS rounds alternating"
echo "# one QP: $ONE_QP_MSGS messages; $QPS QPs: $PER_QP_MSGS per QP; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| placement | program | 1 QP rounds [Mpps] | $QPS QPs rounds [Mpps] | median ratio $QPS / 1 |"
echo "|---|---|---|---|---:|"
for PLACE in user pinned; do
  s1="" sn="" p1="" pn=""
  for _ in $(seq "$ROUNDS"); do
    s1="$s1 $(pt 1 "$ONE_QP_MSGS")"
    sn="$sn $(pt "$QPS" "$PER_QP_MSGS")"
    p1="$p1 $(perf 1 "$ONE_QP_MSGS")"
    pn="$pn $(perf "$QPS" "$PER_QP_MSGS")"
  done
  label=$([ $PLACE = pinned ] && echo "pinned (server CPU 0, client CPU 1)" || echo "as a user starts them")
  echo "| $label | ib_write_bw (shim) |$s1 |$sn | $(ratio "$(echo "$sn" | median)" "$(echo "$s1" | median)") |"
  echo "| $label | uroce-perf |$p1 |$pn | $(ratio "$(echo "$pn" | median)" "$(echo "$p1" | median)") |"
done
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
