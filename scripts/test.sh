#!/usr/bin/env bash
# The README's second command (and CI's): install what is missing, build, run every test.
#  1. the normal build (-Wall -Wextra -Werror): every suite (interop: the representative rows of
#     its matrix, tests/interop/meson.build; the whole matrix is docs/interop.md's command);
#  2. an address+undefined sanitizer build of what the unit suites need: those suites again, and
#     a representative part of the port's, the shim's and rdmacm's suites;
#  3. a ThreadSanitizer build of the shim and liburoce-rdmacm: their many-threaded tests;
#  4. a short run of each libFuzzer target (parse, locate, cm, engine, cm_engine).
# Ends with one line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, printed as it ends and summed up before the tally (the whole must stay
# under 45 minutes on CI's 2 cores).
phases=() phase_name="" phase_t0=$SECONDS
phase() {
  [ -n "$phase_name" ] && { phases+=("$(printf '%6ds  %s' $((SECONDS - phase_t0)) "$phase_name")"); echo "== phase done: ${phases[-1]}"; }
  phase_name=$1 phase_t0=$SECONDS
}
phase "install"
bash scripts/install-deps.sh || exit 1

status=0
phase "build"
# A build directory this command sets up gets debug information at -g1 (functions and line
# tables: backtraces and sanitizer reports keep their lines), 143 s instead of 193 s on 2 cores;
# one configured before (by the demo command, or by hand) is built as it is.
bash scripts/build.sh build -Ddebug=false -Dc_args=-g1 -Dcpp_args=-g1 || exit 1
phase "tests (build)"
# UCX over veth and against rxe: their short rows here; over memif the rows the ThreadSanitizer
# run below does not run (the two runs cover memif's whole list; the whole matrices: docs/ucx.md).
UCX_TEST_ROWS_VETH=short UCX_TEST_ROWS_RXE=short UCX_TEST_ROWS_MEMIF=rest \
  meson test -C build --print-errorlogs --num-processes 2 || status=1

# The address+undefined sanitizers run the in-process suites (wire library and engine), then a
# representative part of the data path's: the port over memif (uroce-perf), the shim under many
# threads and its whole API, liburoce-rdmacm's API and a vanished peer (our own programs, built
# with the sanitizers, drive the libraries). Only what those tests need is built (scripts/build.sh
# with UROCE_SUITES: their programs and depends, from meson introspect; the data path's targets
# are named here). DPDK itself is not instrumented.
asan_suites=(proto engine security)
asan_suite_args=(--no-suite browser)  # the page's browser test: the dissector's --html is in test dissect
for s in "${asan_suites[@]}"; do asan_suite_args+=(--suite "$s"); done
asan_tests=(memif-ops memif-client-first shim-stress shim-api-sweep rdmacm-api rdmacm-vanish)
asan_targets=(bench/uroce-perf tools/dissect/uroce-dissect verbs_shim/liburoce-verbs.so
  verbs_shim/rdmacm/liburoce-rdmacm.so tests/shim/stress tests/shim/api_sweep tests/rdmacm/rdmacm_api
  tests/rdmacm/rdmacm_vanish)
phase "ASan build"
# Debug information at -g1 (functions and line tables: what a sanitizer's stack trace names) and
# not -g: a third less compile time for the same reports (tests/engine/ops_test.cpp 16.6 s -> 11.3 s).
UROCE_SUITES="${asan_suites[*]}" bash scripts/build.sh build-asan \
  -Db_sanitize=address,undefined -Db_lundef=false -Doptimization=1 -Ddebug=false -Dc_args=-g1 -Dcpp_args=-g1 \
  -Dbench=disabled || exit 1
ninja -C build-asan "${asan_targets[@]}" || exit 1
phase "ASan tests"
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
meson test -C build-asan --no-rebuild --print-errorlogs --num-processes 2 "${asan_suite_args[@]}" || status=1
# The shim is preloaded before the program's own libasan: the order check would refuse that.
ASAN_OPTIONS=$ASAN_OPTIONS:verify_asan_link_order=0 UROCE_STRESS_SECONDS=10 \
  meson test -C build-asan --no-rebuild --print-errorlogs --logbase testlog-datapath "${asan_tests[@]}" || status=1
unset ASAN_OPTIONS UBSAN_OPTIONS

# ThreadSanitizer: the shim and liburoce-rdmacm built with -fsanitize=thread, driven by programs
# of ours that call them from many threads at once (tests/shim/stress.cpp: 8 workers, sharers of
# a CQ and an SRQ, churn and events; tests/rdmacm/api_test.cpp). A report ends the program
# (halt_on_error) and fails its test. The 10-minute run: docs/reliability.md.
tsan_targets=(verbs_shim/liburoce-verbs.so verbs_shim/rdmacm/liburoce-rdmacm.so tests/shim/stress tests/rdmacm/rdmacm_api)
# rdmacm-memif: unmodified rping, ucmatose, udaddy, rdma_server/client and cmtime (its server
# and client each with several threads) load the instrumented libraries, the runtime preloaded
# after them by uroce-run ($UROCE_PRELOAD). DPDK's own threads are not instrumented:
# tests/tsan.supp. A report in any test's output fails it (the tally below).
phase "TSan build"
[ -f build-tsan/build.ninja ] || meson setup build-tsan --werror -Db_sanitize=thread -Db_lundef=false \
  -Doptimization=1 -Dbench=disabled >/dev/null || exit 1
ninja -C build-tsan "${tsan_targets[@]}" || exit 1
phase "TSan tests"
UROCE_STRESS_SECONDS=${UROCE_TSAN_STRESS_SECONDS:-15} \
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
  UROCE_PRELOAD=$(gcc -print-file-name=libtsan.so) \
  meson test -C build-tsan --no-rebuild --print-errorlogs shim-stress rdmacm-api rdmacm-memif || status=1
# UCX (Debian's ucx_info and ucx_perftest, unmodified) on the instrumented shim, 11 rows over
# memif. UCX's memory hooks patch malloc and mmap as the runtime does: off. Without them UCX's
# registration cache cannot work and UCX 1.13.1 would take its global on-demand-paging key,
# whose release at exit passes a memory handle where a parameter block is expected (a crash in
# uct_ib_md_close, no TSan report; docs/reliability.md): direct registration.
UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no UCX_IB_REG_METHODS=direct \
  UCX_TEST_ROWS=short \
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
  UROCE_PRELOAD=$(gcc -print-file-name=libtsan.so) \
  meson test -C build-tsan --no-rebuild --print-errorlogs --logbase testlog-ucx ucx-info ucx-perftest-memif || status=1

# Each libFuzzer target briefly (scripts/fuzz.sh; the long runs are in docs/security.md).
phase "fuzz"
fuzz_results=()
for t in parse locate cm engine cm_engine; do
  if bash scripts/fuzz.sh "${UROCE_FUZZ_SECONDS:-5}" "$t"; then fuzz_results+=(0); else fuzz_results+=(1); status=1; fi
done

phase ""
printf '%s\n' "== phases (wall time):" "${phases[@]}" "$(printf '%6ds  total' "$SECONDS")"
/usr/bin/python3 - "${fuzz_results[@]}" <<'PY'
import json, sys
passed = failed = skipped = 0
failures = []  # named again right above the tally: the end of a long log is what one sees of it
# A sanitizer's report fails the test it appeared in, whatever the test's own verdict (a report
# in a server the scenario only stops, for one).
# (LeakSanitizer's reports are left to each test: shim-api-sweep's output has one for
# libLLVM-14, which a program it runs loads, not uroce's.)
REPORTS = ("WARNING: ThreadSanitizer", "ERROR: AddressSanitizer", "runtime error:")
for log in ("build/meson-logs/testlog.json", "build-asan/meson-logs/testlog.json",
            "build-asan/meson-logs/testlog-datapath.json", "build-tsan/meson-logs/testlog.json",
            "build-tsan/meson-logs/testlog-ucx.json"):
    try:
        with open(log) as f:
            for line in f:
                r = json.loads(line)
                res = r.get("result")
                out = (r.get("stdout") or "") + (r.get("stderr") or "")
                if res == "OK" and any(m in out for m in REPORTS):
                    print(f"{log}: {r.get('name')}: a sanitizer report in its output")
                    res = "FAIL"
                if res in ("OK", "EXPECTEDFAIL"): passed += 1
                elif res == "SKIP": skipped += 1
                else:
                    failed += 1
                    failures.append(f"{r.get('name')} ({res}, {r.get('duration', 0):.0f} s, {log})")
    except FileNotFoundError:
        failed += 1
        failures.append(f"{log} missing (its phase did not run)")
for t, rc in zip(("parse", "locate", "cm", "engine", "cm_engine"), sys.argv[1:]):
    if rc == "0": passed += 1
    else:
        failed += 1
        failures.append(f"fuzz_{t} (scripts/fuzz.sh: a crash, or it did not build)")
for f in failures:
    print(f"FAILED: {f}")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
PY
[ $? -eq 0 ] || status=1
exit $status
