#!/bin/bash
# bench-cc-memif.sh: congestion control on a real link (issue 33). Four QPs of 64 KiB WRITEs
# over memif (uroce-perf, one process per side) through a congestion point on the client's
# transmit side (keys bottleneck_*: a 10 Gbit/s queue of 512 KiB, RED marking from K = 32 KiB to
# 128 KiB, every frame ECT(0)), QP i starting i x 5 ms after the first; without congestion
# control, with DCQCN at a ConnectX's defaults and with the setting of docs/congestion.md ("A
# setting that meets issue 33's target": the paper's timers), ROUNDS rounds alternating. Prints
# one markdown table row per run from uroce-perf's --flow-log summary (bench/perf/flows.hpp:
# 10 ms windows while all four run): goodput, Jain's index and when it reached 0.95 for good,
# the queue's 99th percentile (all / converged), drops, and the link's and engines' counters.
#
#   scripts/bench-cc-memif.sh [BUILD_DIR]   (default build-bench; needs root; about 1 minute)
# Environment: ROUNDS (default 3), GBPS (default 10), MSGS (messages per QP, default 4000),
# PLACE=pinned (server on CPU 0, client on CPU 1; default: as a user starts them), SVG=DIR (the
# first round's pictures of each QP's rate and the queue: DIR/memif-CC.svg).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh  # bench_build, wait_memif, cpu_line, bench_log, track, on
BUILD=${1:-build-bench}
bench_build "$BUILD"
PERF=$BUILD/bench/uroce-perf
ROUNDS=${ROUNDS:-3} GBPS=${GBPS:-10} MSGS=${MSGS:-4000} PLACE=${PLACE:-user} SVG=${SVG:-}
[ -x "$PERF" ] || { echo "build first: $PERF" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 1; }
bench_log bench-cc-memif
fail() { cat "$@" >&2; exit 1; }

BN="bottleneck_mbps = $((GBPS * 1000))
bottleneck_queue_kb = 512
bottleneck_k_kb = 32
bottleneck_kmax_kb = 128
bottleneck_pmax = 1
ecn = ect0"
declare -A CC
CC[off]="cc = off"
CC[dcqcn-defaults]="cc = dcqcn
cc_line_rate = 40000"
CC[dcqcn-paper-timers]="cc = dcqcn
cc_line_rate = 40000
rpg_time_reset = 55
rpg_byte_reset = 1048576
dce_tcp_rtt = 55
rpg_min_rate = 500"
NAMES=(off dcqcn-defaults dcqcn-paper-timers)
for n in "${NAMES[@]}"; do
  { cat config/memif-client.conf; echo "$BN"; echo "${CC[$n]}"; } > "$LOG/$n.conf"
done
OPTS=(--test write -s 65536 -n "$MSGS" -q 4 --cq-mod 1 --stagger-ms 5 --timeout 120)

# run NAME: one client run through the bottleneck -> a table row
run() {
  rm -f /tmp/uroce-memif.sock
  on srv "$PERF" --config config/memif-server.conf "${OPTS[@]}" > "$LOG/srv" 2>&1 &
  track $!
  local srv=$!
  wait_memif || fail "$LOG/srv"
  local svg=()
  [ -n "$SVG" ] && [ ! -e "$SVG/memif-$1.svg" ] && svg=(--flow-svg "$SVG/memif-$1.svg")
  on cli "$PERF" --config "$LOG/$1.conf" --stats "${OPTS[@]}" --flow-log "$LOG/$1.csv" "${svg[@]}" 127.0.0.1 > "$LOG/cli" 2>&1 ||
    { echo "uroce-perf ($1) failed:" >&2; fail "$LOG/cli" "$LOG/srv"; }
  timeout 20 tail --pid=$srv -f /dev/null || kill $srv 2>/dev/null || true
  python3 - "$1" "$GBPS" "$LOG/cli" "$LOG/srv" <<'PY'
import re, sys
name, gbps, cli, srv = sys.argv[1], float(sys.argv[2]), open(sys.argv[3]).read(), open(sys.argv[4]).read()
f = re.search(r"^flows: .*goodput ([\d.]+) Gbit/s, Jain \(last window\) ([\d.]+), Jain >= 0.95 after the last start: "
              r"([^,]+), queue p99 KiB (\d+) / (\S+) \(all / converged\), drops (\d+) / (\S+)", cli, re.M)
def ctr(text, which, key):
    m = re.search(r"^%s:.*\b%s=(\d+)" % (which, key), text, re.M)
    return int(m.group(1)) if m else 0
if not f or "data verification: OK" not in cli:
    sys.exit(f"{name}: no flows line or data not verified")
good, jain, conv, q99, q99c, drops, dropsc = f.groups()
met = (float(good) >= 0.9 * gbps and conv != "never" and float(conv.split()[0]) <= 50 and q99c != "-"
       and int(q99c) < 64 and dropsc == "0")
print(f"| {name} | {float(good):.2f} | {100 * float(good) / gbps:.0f}% | {jain} | {conv} | {q99} / {q99c} | "
      f"{drops} / {dropsc} | {ctr(cli, 'link', 'bottleneck_marked')} | {ctr(cli, 'engine', 'retransmitted')} | "
      f"{ctr(cli, 'engine', 'cnp_rcvd')} | {'yes' if met else 'no'} |")
PY
}

echo "$(cpu_line); $(date -u +%Y-%m-%dT%H:%MZ); $(git rev-parse --short HEAD 2>/dev/null || echo '?'); placement: $PLACE"
echo "4 QPs x $MSGS WRITEs of 64 KiB over memif, QP i starting at i x 5 ms; bottleneck $GBPS Gbit/s, queue 512 KiB, RED 32-128 KiB"
echo
echo "| cc | goodput Gbit/s | of bottleneck | Jain (last 10 ms) | Jain >= 0.95 after last start | queue p99 KiB (all / converged) | drops (all / converged) | marked | retransmitted | CNPs | target met |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for _ in $(seq "$ROUNDS"); do
  for n in "${NAMES[@]}"; do run "$n"; done
done
