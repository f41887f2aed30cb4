#!/usr/bin/env bash
# Goodput under loss on the FakeLink's link-rate model (virtual time: the figures do not depend
# on the machine): 64 KiB WRITE, 4 KiB SEND, 8 B FETCH_ADD, clean, at 0.1, 1 and 3% random loss
# each way and with 1% reordering. Prints two markdown tables (docs/reliability.md): go-back-N
# (selective_repeat off, the wire toward any peer) and selective repeat on at both ends.
#   scripts/bench-loss.sh [loss_bench options: --rate-gbps G --latency-ns N --mtu B --scale F
#                          --case NAME --set key=value]
# (options apply to both runs; --set selective_repeat=0|1 given here overrides the mode of both)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-bench
[ -f "$dir/build.ninja" ] || meson setup "$dir" --buildtype=release -Db_ndebug=true >/dev/null
ninja -C "$dir" bench/loss_bench >/dev/null
for sr in 0 1; do
  [ "$sr" = 1 ] && echo
  "./$dir/bench/loss_bench" --set selective_repeat=$sr "$@"
done
