#!/usr/bin/env bash
# The engine's own ceiling: two engines on the FakeLink sharing one core (both directions'
# frames built, ICRC'd, parsed and checked), 64 B and 1 MiB WRITE and SEND, next to memcpy
# of the same sizes in the same run. Prints a markdown table.
#   scripts/bench-engine.sh [extra Google Benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-bench
[ -f "$dir/build.ninja" ] || meson setup "$dir" --buildtype=release -Db_ndebug=true >/dev/null
ninja -C "$dir" bench/engine_bench >/dev/null
out=$(mktemp)
taskset -c "${UROCE_BENCH_CPU:-1}" "./$dir/bench/engine_bench" --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_format=json "$@" > "$out"
/usr/bin/python3 - "$out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = {}
for b in d["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    name = b["run_name"].split("/min_time")[0]
    rows[name] = b
memcpy = {k.split("/")[1]: v for k, v in rows.items() if k.startswith("BM_Memcpy")}
print("| operation | size | messages/s | Gbit/s | frames per message | memcpy Gbit/s (same run) | uroce / memcpy |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, b in rows.items():
    if name.startswith("BM_Memcpy"):
        continue
    op, size = name.split("/")[:2]
    m = memcpy.get(size, {}).get("Gbit/s", 0)
    g = b["Gbit/s"]
    r = b['msgs/s']
    rate = f"{r/1e6:.2f} M" if r >= 1e5 else f"{r/1e3:.2f} k"
    print(f"| {op[3:].upper()} | {int(size):,} B | {rate} | {g:.2f} | {b['frames/msg']:.2f} | {m:.1f} | {g/m if m else 0:.3f} |")
PY
rm -f "$out"
