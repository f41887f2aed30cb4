#!/usr/bin/env bash
# Scale (issue 30): memory per RC QP + CQ by queue depth, the engine alone (bench/qp_memory_bench.cpp).
# Prints a markdown table (docs/performance.md, "Memory per QP").
#   scripts/bench-scale.sh [--qps N]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-bench
[ -f "$dir/build.ninja" ] || meson setup "$dir" --buildtype=release -Db_ndebug=true >/dev/null
ninja -C "$dir" bench/qp_memory_bench >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
"./$dir/bench/qp_memory_bench" "$@"
