#!/bin/bash
# Runs a libFuzzer target for SECONDS (default 60) and summarises the run: length, executions,
# executions per second, crashes. TARGET is parse (default: proto::parse() and build(),
# tests/fuzz/fuzz_parse.cpp), locate (proto::locate(), the ARP / ND views and the port's
# control plane, tests/fuzz/fuzz_locate.cpp), cm (the CM MAD layer: cm::parse(), cm::emit(), the
# rdma_cm IP header, tests/fuzz/fuzz_cm.cpp), engine (a connected pair of engines driven by
# forged frames, posted work and deregistration, tests/fuzz/fuzz_engine.cpp) or cm_engine (the
# connection manager's state machine in two engines, driven by MADs, calls and time,
# tests/fuzz/fuzz_cm_engine.cpp).
#
#   scripts/fuzz.sh [SECONDS] [TARGET]
#   UROCE_FUZZ_SR=on scripts/fuzz.sh 300 engine   # selective repeat on at both ends in every input
#
# Builds outside meson with clang++ -fsanitize=fuzzer,address,undefined into build-fuzz/
# (build-fuzz-TARGET/ for the others; override with FUZZ_BUILD=dir). The sources are compiled
# once into build-fuzz-obj/ (FUZZ_OBJ=dir), shared by the targets: a small ninja file made here on
# each run; ninja compiles a source again only when it, a header it includes or its command line
# changed (-fsanitize=fuzzer-no-link,address,undefined for the fuzzers' objects, each target
# linked with -fsanitize=fuzzer). Seeds the corpus with every
# frame of the golden captures (GOLDEN_DIR, default ../shared/golden) and keeps the corpus it
# grows between runs. A crash leaves build-fuzz/artifacts/crash-*; reproduce it with
# build/tests/fuzz/fuzz_regress FILE (parse), build/tests/fuzz/fuzz_locate FILE (locate),
# build/tests/fuzz/fuzz_cm FILE (cm) or build/tests/fuzz/fuzz_cm_engine FILE (cm_engine).
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_TO_RUN=${1:-60}
TARGET=${2:-parse}
seed=yes
case "$TARGET" in
  parse) extra=() ;;
  locate) extra=(port/neigh.cpp port/config.cpp port/netdev.cpp port/service/route.cpp engine/cc.cpp engine/cc_dcqcn.cpp engine/cc_timely.cpp) ;;  # ControlPlane (neigh.cpp), gid_str() it logs with (config.cpp), what config.cpp calls for keys netdev (netdev.cpp) and cc (engine/cc*.cpp), the service's routing
  cm) extra=() ;;
  engine|cm_engine) extra=(engine/*.cpp tests/support/fake_link.cpp); seed=no ;;  # inputs are actions, not frames
  *) echo "usage: scripts/fuzz.sh [SECONDS] [parse|locate|cm|engine|cm_engine]" >&2; exit 2 ;;
esac
BUILD=${FUZZ_BUILD:-build-fuzz$([ "$TARGET" = parse ] || echo "-$TARGET")}
GOLDEN=${GOLDEN_DIR:-$(cd .. && pwd)/shared/golden}
CXX=${FUZZ_CXX:-clang++}
OBJ=${FUZZ_OBJ:-build-fuzz-obj}
mkdir -p "$BUILD/seed" "$BUILD/corpus" "$BUILD/artifacts" "$OBJ"

isal_cflags=() isal_libs=()
if pkg-config --exists libisal; then
  isal_cflags=(-DUROCE_HAVE_ISAL $(pkg-config --cflags libisal))
  isal_libs=($(pkg-config --libs libisal))
fi
srcs=(tests/fuzz/fuzz_$TARGET.cpp proto/*.cpp "${extra[@]}")  # the whole wire library, as meson's proto_lib
# The fuzzer's objects, and the corpus writer's (no sanitizer, its own main(): seeded targets only).
fuzz_flags=(-std=c++20 -O2 -g -Wall -Wextra -Werror -I. -fsanitize=fuzzer-no-link,address,undefined
  -fno-sanitize-recover=all -DUROCE_LIBFUZZER "${isal_cflags[@]}")
fuzz_ldflags=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all "${isal_libs[@]}")
plain_flags=(-std=c++20 -O1 -I. -DUROCE_GOLDEN_DIR="\"$GOLDEN\"" "${isal_cflags[@]}" $(pkg-config --cflags libpcap))
plain_ldflags=("${isal_libs[@]}" $(pkg-config --libs libpcap))

# One ninja file for this target's objects and links; the objects stay shared in $OBJ.
n() { local v; v=$(printf '%q ' "$@"); printf '%s' "${v//\$/\$\$}"; }  # shell-quoted, ninja-escaped
p() { local v="${1//\$/\$\$}"; v="${v//:/\$:}"; printf '%s' "${v// /\$ }"; }  # a path in a build line
{
  echo "# Made by scripts/fuzz.sh for fuzz_$TARGET on each run; the objects are shared by every target."
  echo "ninja_required_version = 1.3"
  echo "builddir = $(p "$OBJ")"
  echo "cxx = $(n "$CXX")"
  echo "fuzz_flags = $(n "${fuzz_flags[@]}")"
  echo "plain_flags = $(n "${plain_flags[@]}")"
  for f in fuzz plain; do
    printf 'rule cxx_%s\n  command = $cxx $%s_flags -MD -MF $out.d -c $in -o $out\n  depfile = $out.d\n  deps = gcc\n' "$f" "$f"
  done
  printf 'rule link\n  command = $cxx $in -o $out $ldflags\n'
  objs=() plain_objs=()
  for s in "${srcs[@]}"; do
    o=$OBJ/fuzz/${s%.cpp}.o
    echo "build $(p "$o"): cxx_fuzz $(p "$s")"
    objs+=("$(p "$o")")
  done
  echo "build $(p "$BUILD/fuzz_$TARGET"): link ${objs[*]}"
  echo "  ldflags = $(n "${fuzz_ldflags[@]}")"
  if [ "$seed" = yes ]; then
    for s in "${srcs[@]}" tools/pcap/pcapio.cpp; do
      o=$OBJ/plain/${s%.cpp}.o
      echo "build $(p "$o"): cxx_plain $(p "$s")"
      plain_objs+=("$(p "$o")")
    done
    echo "build $(p "$BUILD/corpus_writer"): link ${plain_objs[*]}"
    echo "  ldflags = $(n "${plain_ldflags[@]}")"
  fi
} >"$OBJ/build.ninja"

echo "== building $BUILD/fuzz_$TARGET ($CXX -fsanitize=fuzzer,address,undefined)"
outs=("$BUILD/fuzz_$TARGET")
[ "$seed" = no ] || outs+=("$BUILD/corpus_writer")
if ! ninja -f "$OBJ/build.ninja" -j "${FUZZ_JOBS:-$(nproc)}" "${outs[@]}" >"$OBJ/ninja.log" 2>&1; then
  cat "$OBJ/ninja.log" >&2
  exit 1
fi

if [ "$seed" = yes ]; then
  echo "== seeding the corpus from $GOLDEN"
  "$BUILD/corpus_writer" --write-corpus "$BUILD/seed"
fi

echo "== fuzzing for ${SECONDS_TO_RUN} s"
log="$BUILD/fuzz.log"
set +e
"$BUILD/fuzz_$TARGET" -max_total_time="$SECONDS_TO_RUN" -print_final_stats=1 \
  -artifact_prefix="$BUILD/artifacts/" "$BUILD/corpus" "$BUILD/seed" >"$log" 2>&1
status=$?
set -e

grep -aE '^#[0-9]+[[:space:]]+(INITED|DONE)|^Done ' "$log" || true
stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
done_line=$(grep -E '^Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1 || true)
secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' <<<"$done_line")
execs=$(stat number_of_executed_units)
rate=$(stat average_exec_per_sec)
newu=$(stat new_units_added)
rss=$(stat peak_rss_mb)
crashes=$(find "$BUILD/artifacts" -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' | wc -l)
corpus=$(find "$BUILD/corpus" -type f | wc -l)

echo
echo "fuzz_$TARGET: ${secs:-?} s, ${execs:-?} execs, ${rate:-?} exec/s, ${newu:-?} new units" \
  "(corpus now ${corpus} files), peak RSS ${rss:-?} MB, exit status ${status}"
if [ "$status" -ne 0 ] || [ "$crashes" -ne 0 ]; then
  echo "CRASH: see $log and $BUILD/artifacts/"
  tail -40 "$log"
  exit 1
fi
echo "no crash"
