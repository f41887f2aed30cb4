#!/usr/bin/env bash
# The README's second command (and CI's): install what is missing, build, run every test.
#  1. the normal build (-Wall -Wextra -Werror): every suite (interop: the representative rows of
#     its matrix, tests/interop/meson.build; the whole matrix is docs/interop.md's command);
#  2. an address+undefined sanitizer build of what the unit suites need: those suites again;
#  3. a short run of each libFuzzer target (parse, locate, cm, engine, cm_engine).
# Ends with one line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh || exit 1

status=0
bash scripts/build.sh build || exit 1
meson test -C build --print-errorlogs --num-processes 2 || status=1

# The sanitizers run the in-process suites (wire library and engine); the DPDK and shim suites
# drive separate processes and run in the normal build only. Only what those suites' tests need is
# built (scripts/build.sh with UROCE_SUITES: their programs and depends, from meson introspect).
asan_suites=(proto engine security)
asan_suite_args=(); for s in "${asan_suites[@]}"; do asan_suite_args+=(--suite "$s"); done
UROCE_SUITES="${asan_suites[*]}" bash scripts/build.sh build-asan \
  -Db_sanitize=address,undefined -Db_lundef=false -Doptimization=1 -Dbench=disabled -Ddpdk=disabled || exit 1
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --no-rebuild --print-errorlogs --num-processes 2 "${asan_suite_args[@]}" || status=1

# Each libFuzzer target briefly (scripts/fuzz.sh; the long runs are in docs/security.md).
fuzz_results=()
for t in parse locate cm engine cm_engine; do
  if bash scripts/fuzz.sh "${UROCE_FUZZ_SECONDS:-20}" "$t"; then fuzz_results+=(0); else fuzz_results+=(1); status=1; fi
done

/usr/bin/python3 - "${fuzz_results[@]}" <<'PY'
import json, sys
passed = failed = skipped = 0
for d in ("build", "build-asan"):
    try:
        with open(f"{d}/meson-logs/testlog.json") as f:
            for line in f:
                r = json.loads(line)
                res = r.get("result")
                if res in ("OK", "EXPECTEDFAIL"): passed += 1
                elif res == "SKIP": skipped += 1
                else: failed += 1
    except FileNotFoundError:
        failed += 1
for rc in sys.argv[1:]:
    if rc == "0": passed += 1
    else: failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
