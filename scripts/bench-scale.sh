#!/usr/bin/env bash
# Scale (issue 30), the engine alone (bench/scale_bench.cpp): memory per RC QP + CQ by queue depth,
# connected and after use, 262,144 QPs at depth 1 and 128 created, connected and destroyed, message
# rate beside idle QPs and over many QPs.
# Prints three markdown tables (docs/performance.md, "Scale").
#   scripts/bench-scale.sh [--qps N] [--many N] [--idle N] [--msgs N]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-bench
[ -f "$dir/build.ninja" ] || meson setup "$dir" --buildtype=release -Db_ndebug=true >/dev/null
ninja -C "$dir" bench/scale_bench >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
"./$dir/bench/scale_bench" "$@"
