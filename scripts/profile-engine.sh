#!/usr/bin/env bash
# Instructions per message of the engine (deterministic, unlike wall-clock rates on a shared
# machine): callgrind on bench/engine_bench (two engines on the FakeLink, one thread), counting
# only inside Bench::run, divided by the messages Bench::run ran (engine_bench prints them).
# Both sides are counted: requester, responder, ACKs, completions, the FakeLink.
#   scripts/profile-engine.sh [FILTER] [TOP]     default BM_Write/64/ and the top 25 functions
set -euo pipefail
cd "$(dirname "$0")/.."
filter=${1:-BM_Write/64/}
top=${2:-25}
dir=build-bench
[ -f "$dir/build.ninja" ] || meson setup "$dir" --buildtype=release -Db_ndebug=true >/dev/null
ninja -C "$dir" bench/engine_bench >/dev/null
out=$(mktemp -d)
valgrind --tool=callgrind --callgrind-out-file="$out/cg" --toggle-collect='*Bench::run*' \
  "./$dir/bench/engine_bench" --benchmark_filter="$filter" --benchmark_min_time=0.05 \
  >"$out/stdout" 2>"$out/stderr"
msgs=$(sed -n 's/^engine_bench: messages run: //p' "$out/stderr")
callgrind_annotate "$out/cg" >"$out/ann"
total=$(sed -n 's/^\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' "$out/ann" | tr -d ,)
echo "filter $filter: $msgs messages, $total instructions, $((total / msgs)) instructions per message"
echo "top functions (instructions per message, share):"
awk -v m="$msgs" -v t="$total" '/file:function/{go=1; next} go && /^ *[0-9,]+ / {
    n=$1; gsub(",","",n); $1=""; if (++k > '"$top"') exit;
    sub(/^ +/, ""); sub(/\( *[0-9.]+%\) +/, "");
    printf "%8.1f  %5.1f%%  %s\n", n/m, 100*n/t, substr($0, 1, 110) }' "$out/ann"
rm -rf "$out"
