#!/usr/bin/env bash
# Many rdma_cm connections (issue 30): rdmacm-utils' cmtime, unmodified, uroce <-> uroce through
# liburoce-verbs.so and liburoce-rdmacm.so (scripts/uroce-run), over memif and over the netns
# veth pair (af_packet), with -c 100 and -c 10000 in the same run. Prints cmtime's own table for
# each and a summary (docs/performance.md, "Many rdma_cm connections"). Root; every run bounded
# (timeout), its processes and the namespaces removed on exit.
#   scripts/bench-cmtime.sh [BUILD_DIR] [COUNTS...]     (default: build 100 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(100 10000)
ninja -C "$dir" verbs_shim/liburoce-verbs.so verbs_shim/rdmacm/liburoce-rdmacm.so >/dev/null
export UROCE_VERBS_LIB=$PWD/$dir/verbs_shim/liburoce-verbs.so UROCE_RDMACM_LIB=$PWD/$dir/verbs_shim/rdmacm/liburoce-rdmacm.so
out=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  scripts/netns-pair down >/dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup EXIT
port=7950
run() {  # link count
  local link=$1 n=$2 ip pre_s=() pre_c=() conf_s conf_c
  port=$((port + 1))
  if [ "$link" = memif ]; then
    ip=198.19.0.1 conf_s=config/memif-server.conf conf_c=config/memif-client.conf
  else
    ip=198.18.0.12 conf_s=config/veth-b.conf conf_c=config/veth-a.conf
    pre_s=(ip netns exec uroce-b) pre_c=(ip netns exec uroce-a)
  fi
  "${pre_s[@]}" timeout 600 scripts/uroce-run --config "$conf_s" --no-device-view -- \
    cmtime -b "$ip" -p "$port" -c "$n" >"$out/s.log" 2>&1 &
  pids=($!)
  sleep 3
  local rc=0
  "${pre_c[@]}" timeout 600 scripts/uroce-run --config "$conf_c" --no-device-view -- \
    cmtime -s "$ip" -p "$port" -c "$n" >"$out/c.log" 2>&1 || rc=$?
  kill "${pids[0]}" 2>/dev/null || true
  wait "${pids[0]}" 2>/dev/null || true
  pids=()
  local fails
  fails=$(grep -c 'failure\|REJECTED\|error' "$out/c.log" || true)
  echo "### $link, cmtime -c $n: client exit $rc, $fails failed steps"
  echo '```'
  sed -n '/^step/,$p' "$out/c.log"
  echo '```'
  local conn disc
  conn=$(awk '/^connect /{print $3}' "$out/c.log")
  disc=$(awk '/^disconnect /{print $3}' "$out/c.log")
  summary+=("| $link | $n | $rc | $fails | ${conn:-?} ms | ${disc:-?} ms |")
}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; build $dir"
summary=()
for n in "${counts[@]}"; do run memif "$n"; done
scripts/netns-pair up >/dev/null
for n in "${counts[@]}"; do run veth "$n"; done
echo
echo "| link | connections | client exit | failed steps | connect (all) | disconnect (all) |"
echo "|---|---:|---:|---:|---:|---:|"
printf '%s\n' "${summary[@]}"
