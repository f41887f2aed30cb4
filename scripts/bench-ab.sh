#!/usr/bin/env bash
# Two trees of uroce measured in one run, alternately, so that the machine's drift falls on both:
# the engine bench (two engines on the FakeLink, one core: 64 B WRITE and SEND message rate,
# 1 MiB WRITE bandwidth), pinned to one CPU and as a user starts it, and uroce-perf's 64 B WRITE
# rate and 1 MiB WRITE bandwidth over memif (scripts/bench-port.sh, one lcore per side). Prints
# each figure's median over the rounds per tree and the ratio B/A. For a change that should not
# change speed (a restructuring): ratios near 1 within the rounds' spread.
#
#   scripts/bench-ab.sh TREE_A [TREE_B] [ROUNDS]     (TREE_B default: this tree; ROUNDS 3)
# PARTS="engine memif" (the default) chooses what runs in each round.
# Each tree needs `build` (scripts/build.sh) for uroce-perf, or the build PERF_BUILD names (for
# example build-bench, the release build made here); build-bench is made here.
# Needs root (memif).
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(cd "$1" && pwd); B=$(cd "${2:-.}" && pwd); ROUNDS=${3:-3}; PARTS=${PARTS:-engine memif}
PERF_BUILD=${PERF_BUILD:-build}
[ "$(id -u)" = 0 ] || { echo "needs root (memif)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for t in "$A" "$B"; do
  [ -f "$t/build-bench/build.ninja" ] || meson setup "$t/build-bench" "$t" --buildtype=release -Db_ndebug=true >/dev/null
  ninja -C "$t/build-bench" bench/engine_bench >/dev/null
  [ -x "$t/$PERF_BUILD/bench/uroce-perf" ] || { echo "$t: build first (scripts/build.sh)" >&2; exit 1; }
done

filter='BM_(Write|Send)/(64|1048576)/'
engine() {  # tree, label (pinned|unpinned) -> appends "label op size msgs/s Gbit/s" lines
  local pre=()
  [ "$2" = pinned ] && pre=(taskset -c "${UROCE_BENCH_CPU:-1}")
  "${pre[@]}" "$1/build-bench/bench/engine_bench" --benchmark_filter="$filter" --benchmark_format=json \
    2>/dev/null | /usr/bin/python3 -c '
import json, sys
for b in json.load(sys.stdin)["benchmarks"]:
    op, size = b["run_name"].split("/")[:2]
    print(sys.argv[1], op[3:].upper(), size, b["msgs/s"], b["Gbit/s"])' "$2"
}
memif() {  # tree -> "memif WRITE 64 Mpps" and "memif WRITE 1048576 Gbit/s"
  (cd "$1" && LINKS=memif REPEAT=1 bash scripts/bench-port.sh "$PERF_BUILD") | awk -F'|' '/^\| memif/ {
    gsub(/ /, ""); print "memif WRITE 64", $4 * 1e6, 0; print "memif WRITE 1048576", 0, $6 }'
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores," \
     "AVX-512F: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# A = $A ($(git -C "$A" rev-parse --short HEAD)), B = $B ($(git -C "$B" rev-parse --short HEAD)), $ROUNDS rounds, A then B in odd rounds, B then A in even ones"
for r in $(seq "$ROUNDS"); do
  order="A B"; [ $((r % 2)) = 0 ] && order="B A"  # who runs second alternates (it has run faster)
  for t in $order; do
    dir=$A; [ $t = B ] && dir=$B
    {
      case " $PARTS " in *" engine "*) engine "$dir" pinned; engine "$dir" unpinned ;; esac
      case " $PARTS " in *" memif "*) memif "$dir" ;; esac
    } | sed "s/^/$t $r /" >> "$out/rows"
  done
done

/usr/bin/python3 - "$out/rows" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    t, r, how, op, size, rate, gbit = line.split()
    key = (how, op, int(size))
    v = float(gbit) if int(size) >= 1 << 20 else float(rate)
    rows.setdefault(key, {"A": {}, "B": {}})[t][int(r)] = v
def fmt(size, v):
    return f"{v:.2f} Gbit/s" if size >= 1 << 20 else f"{v / 1e6:.2f} M/s"
print("\n| measurement | A median (min-max) | B median (min-max) | B / A of the medians | B / A per round: median (min-max) |")
print("|---|---|---|---:|---|")
for (how, op, size), d in sorted(rows.items()):
    a, b = list(d["A"].values()), list(d["B"].values())
    if not a or not b:
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    pr = [d["B"][r] / d["A"][r] for r in d["A"] if r in d["B"] and d["A"][r]]
    name = ("engine bench, " + how if how != "memif" else "uroce-perf over memif") + f", {op} {size:,} B"
    print(f"| {name} | {fmt(size, ma)} ({fmt(size, min(a))}-{fmt(size, max(a))}) | "
          f"{fmt(size, mb)} ({fmt(size, min(b))}-{fmt(size, max(b))}) | {mb / ma if ma else 0:.3f} | "
          f"{statistics.median(pr):.3f} ({min(pr):.3f}-{max(pr):.3f}) |")
PY
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
