# Helpers the memif benchmarks share (sourced by scripts/bench-side.sh, bench-qps.sh,
# bench-placement.sh, bench-cc-memif.sh, bench-capture.sh, bench-port.sh and bench-service.sh,
# from the source tree's top).

# The build the bench runs: build-bench, a release build, made here if missing and brought up
# to date; any other directory is used as it is.
bench_build() {
  if [ "$1" = build-bench ]; then
    [ -f "$1/build.ninja" ] || meson setup "$1" --buildtype=release -Db_ndebug=true > /dev/null
    ninja -C "$1" > /dev/null
  fi
}

# The memif server's abstract socket is listening (10 s at most).
wait_memif() {
  for _ in $(seq 200); do grep -q "@/tmp/uroce-memif.sock" /proc/net/unix && return 0; sleep 0.05; done
  return 1
}

# A server listens on TCP port $1 (perftest's exchange; $2 tenths of a second at most, default 150).
wait_tcp() {
  for _ in $(seq $(( ${2:-150} * 2 ))); do ss -ltnH | grep -q ":$1\b" && return 0; sleep 0.05; done
  return 1
}

# "CPU model (N cores; features)": the machine a figure was measured on.
cpu_line() {
  local cpu flags feat=""
  cpu=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)
  flags=$(grep -m1 '^flags' /proc/cpuinfo)
  for f in avx2 avx512f vpclmulqdq; do case " $flags " in *" $f "*) feat="$feat $f" ;; esac; done
  echo "$cpu ($(nproc) cores;$feat)"
}

# A log directory of the bench's own ($LOG, /tmp/uroce-$1.*); the servers named in its file
# "pids" (track PID: servers start inside command substitutions, so their PIDs go to a file)
# are stopped and the directory removed when the script ends, whichever way.
bench_log() {
  LOG=$(mktemp -d "/tmp/uroce-$1.XXXXXX")
  trap bench_cleanup EXIT INT TERM
}
bench_cleanup() {
  [ -f "$LOG/pids" ] && while read -r p; do kill "$p" 2>/dev/null || true; done < "$LOG/pids"
  wait 2>/dev/null || true
  rm -rf "$LOG"
}
track() { echo "$1" >> "$LOG/pids"; }

# A bench of unmodified perftest through the shim against uroce-perf ($1: the build): both built,
# root, perftest installed; the shim's library exported for scripts/uroce-run. Sets PERF and RUN.
need_shim_bench() {
  # shellcheck disable=SC2034  # for the calling script
  PERF=$1/bench/uroce-perf RUN=scripts/uroce-run
  [ -x "$PERF" ] && [ -f "$1/verbs_shim/liburoce-verbs.so" ] || { echo "build first: $PERF, liburoce-verbs.so" >&2; exit 1; }
  [ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 1; }
  command -v ib_write_bw > /dev/null || { echo "perftest is not installed (scripts/install-deps.sh)" >&2; exit 1; }
  export UROCE_VERBS_LIB=$1/verbs_shim/liburoce-verbs.so
}

# on SIDE CMD...: the command as placed ($PLACE pinned: taskset to the side's CPU, server 0,
# client 1; anything else: as it is, as a user starts it)
on() {
  local side=$1; shift
  if [ "$PLACE" = pinned ]; then taskset -c "$([ "$side" = srv ] && echo 0 || echo 1)" "$@"; else "$@"; fi
}

# ratio A B: A / B with two decimals ("-" when B is 0)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
