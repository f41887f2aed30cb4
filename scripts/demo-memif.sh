#!/bin/bash
# demo-memif.sh: two uroce-perf endpoints on this machine, joined by a DPDK memif link (no NIC,
# no namespaces), print perftest's RDMA WRITE bandwidth table over a sweep of message sizes
# (1000 messages per size, more for small ones: 64 MiB per size, at most 2,000,000 messages,
# so that the small-size rates are stable).
# Builds nothing: expects an existing build (default ./build; pass another dir as $1).
# Needs root (DPDK). Extra arguments go to both uroce-perf sides, e.g.:
#   scripts/demo-memif.sh build --max-size 1048576 -n 2000
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
PERF=$BUILD/bench/uroce-perf
[ -x "$PERF" ] || { echo "no $PERF: build first (meson setup $BUILD && ninja -C $BUILD)" >&2; exit 1; }
OPTS=(--test write --mode bw -a --max-size 8388608 -n 1000 --bytes-per-size 67108864 "$@")
SRV_LOG=$(mktemp /tmp/uroce-demo-server.XXXXXX)
SRV=
cleanup() {
  [ -n "$SRV" ] && kill "$SRV" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -f "$SRV_LOG"
}
trap cleanup EXIT INT TERM

"$PERF" --config config/memif-server.conf "${OPTS[@]}" > "$SRV_LOG" 2>&1 &
SRV=$!
for _ in $(seq 100); do grep -q "@/tmp/uroce-memif.sock" /proc/net/unix && break; sleep 0.05; done
# The client prints the table (the server prints the same rows, as reported by the client).
"$PERF" --config config/memif-client.conf "${OPTS[@]}" 127.0.0.1 2>&1 | grep -v "^TELEMETRY"
wait "$SRV" || { echo "server failed:" >&2; cat "$SRV_LOG" >&2; exit 1; }
SRV=
