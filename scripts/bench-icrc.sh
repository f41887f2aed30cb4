#!/bin/bash
# ICRC benchmark: builds bench/icrc_bench in build-bench (buildtype=release), runs it and
# prints a markdown table of GB/s (10^9 bytes per second, median of the repetitions):
#   size | ICRC (ISA-L) GB/s | slice-by-8 GB/s | bytewise GB/s | ratio ICRC/bytewise
# All three columns come from the same run of the same program.
#
#   scripts/bench-icrc.sh [extra Google Benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BENCH_BUILD:-build-bench}
if [ ! -d "$BUILD" ]; then
  meson setup "$BUILD" --buildtype=release -Dbench=enabled >/dev/null
fi
ninja -C "$BUILD" -j1 bench/icrc_bench >/dev/null

json=$(mktemp)
trap 'rm -f "$json"' EXIT
"$BUILD/bench/icrc_bench" --benchmark_format=json --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_min_time=0.3 "$@" >"$json"

/usr/bin/python3 - "$json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
ctx = data["context"]
med = {}
label = {}
for b in data["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    name, size = b["run_name"].split("/")
    if "bytes_per_second" not in b:  # a kernel this CPU lacks (skipped with an error)
        continue
    med[(name, int(size))] = b["bytes_per_second"] / 1e9
    if b.get("label") and name == "BM_Icrc":
        label[int(size)] = b["label"]
def size_name(s):
    if s >= 1 << 20: return "1 MiB data (crc32 only)"
    return {64: "64 B", 256: "256 B", 1024: "1 KiB", 4096: "4 KiB"}[s] + " payload frame"
reps = max(int(b.get("repetitions", 1)) for b in data["benchmarks"])
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
simd = " ".join(f for f in ("pclmulqdq", "vpclmulqdq", "avx2", "avx512f", "avx512vl") if f in flags)
load = open("/proc/loadavg").read().split()[:3]
print(f"CPU: {model}, {ctx.get('num_cpus')} x {ctx.get('mhz_per_cpu')} MHz ({simd}); "
      f"ICRC backend: {label.get(4096, '?').split(',')[0]}; median of {reps} repetitions; "
      f"load average {' '.join(load)}")
print()
print("| size | ICRC (ISA-L) GB/s | slice-by-8 GB/s | bytewise GB/s | ratio ICRC/bytewise |")
print("|---|---:|---:|---:|---:|")
for s in sorted({k[1] for k in med if k[0] == "BM_Icrc"}):
    i, s8, bw = med[("BM_Icrc", s)], med[("BM_Slice8", s)], med[("BM_Bytewise", s)]
    print(f"| {size_name(s)} | {i:.1f} | {s8:.2f} | {bw:.2f} | {i / bw:.0f}x |")
copy_backend = next((b.get("label") for b in data["benchmarks"] if b["run_name"].startswith("BM_CopyFused") and b.get("label")), "?")
print()
print(f"A payload copied with its CRC (crc32_copy: {copy_backend}), against memcpy then crc32 of the copy, and memcpy alone:")
print()
print("| size | memcpy GB/s | memcpy, then crc32 GB/s | crc32_copy GB/s | its AVX2 kernel GB/s | crc32_copy / memcpy | crc32_copy / two passes |")
print("|---|---:|---:|---:|---:|---:|---:|")
for s in sorted({k[1] for k in med if k[0] == "BM_CopyFused"}):
    m, two, f = (med[(n, s)] for n in ("BM_CopyMemcpy", "BM_CopyThenCrc", "BM_CopyFused"))
    a2 = med.get(("BM_CopyAvx2", s))
    name = "1 MiB" if s >= 1 << 20 else f"{s // 1024} KiB"
    a2s = f"{a2:.1f}" if a2 else "- (not on this CPU)"
    print(f"| {name} | {m:.1f} | {two:.1f} | {f:.1f} | {a2s} | {f / m:.2f} | {f / two:.2f}x |")
PY
