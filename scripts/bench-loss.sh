#!/usr/bin/env bash
# Goodput under loss on the FakeLink's link-rate model (virtual time: the figures do not depend
# on the machine): 64 KiB WRITE, 4 KiB SEND, 8 B FETCH_ADD, clean, at 0.1, 1 and 3% random loss
# each way and with 1% reordering. Prints a markdown table (docs/reliability.md).
#   scripts/bench-loss.sh [loss_bench options: --rate-gbps G --latency-ns N --mtu B --scale F
#                          --case NAME --set key=value]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-bench
[ -f "$dir/build.ninja" ] || meson setup "$dir" --buildtype=release -Db_ndebug=true >/dev/null
ninja -C "$dir" bench/loss_bench >/dev/null
"./$dir/bench/loss_bench" "$@"
