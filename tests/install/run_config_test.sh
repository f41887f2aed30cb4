#!/bin/bash
# scripts/uroce-run as run from a source tree (no root, no DPDK, about a second): which library
# it preloads (build-e/, then build/), which config it takes (--config, $UROCE_CONFIG, the
# tree's config/uroce.conf), and that a missing file or a malformed key is one line naming the
# file and the key, with the program never started.
#   run_config_test.sh SOURCE_ROOT CHECKER   (CHECKER: the build's uroce-check-config)
set -uo pipefail
root=$(cd "${1:?usage: run_config_test.sh SOURCE_ROOT CHECKER}" && pwd)
checker=${2:?usage: run_config_test.sh SOURCE_ROOT CHECKER}
t=$(mktemp -d /tmp/uroce-run-test.XXXXXX)
trap 'rm -rf "$t"' EXIT
failures=0
check() {  # check NAME CONDITION-RESULT DETAIL
  if [ "$2" -eq 0 ]; then echo "ok: $1"; else echo "FAIL: $1: $3"; failures=$((failures + 1)); fi
}

# A scratch source tree: the script, two build folders with a (dummy) library and the checker.
mkdir -p "$t/tree/scripts" "$t/tree/config"
cp "$root/scripts/uroce-run" "$t/tree/scripts/"
for b in build build-e; do
  mkdir -p "$t/tree/$b/verbs_shim" "$t/tree/$b/tools/run"
  : > "$t/tree/$b/verbs_shim/liburoce-verbs.so"
  cp "$checker" "$t/tree/$b/tools/run/uroce-check-config"
done
cp "$root/config/memif-server.conf" "$t/tree/config/uroce.conf"
cp "$root/config/memif-client.conf" "$t/client.conf"
run="$t/tree/scripts/uroce-run"
show='echo "$UROCE_CONFIG|$LD_PRELOAD"'
cd "$t"
unset UROCE_CONFIG UROCE_VERBS_LIB LD_PRELOAD

out=$("$run" -- sh -c "$show" 2>/dev/null)
[ "$out" = "$t/tree/config/uroce.conf|$t/tree/build-e/verbs_shim/liburoce-verbs.so" ]
check "tree default config, build-e/ first" $? "$out"
rm -rf "$t/tree/build-e"
out=$("$run" -- sh -c "$show" 2>/dev/null)
[ "$out" = "$t/tree/config/uroce.conf|$t/tree/build/verbs_shim/liburoce-verbs.so" ]
check "build/ when there is no build-e/" $? "$out"
# liburoce-rdmacm.so beside the verbs shim (a build folder's verbs_shim/rdmacm/): preloaded after
# it, unless --no-rdmacm.
mkdir -p "$t/tree/build/verbs_shim/rdmacm"
: > "$t/tree/build/verbs_shim/rdmacm/liburoce-rdmacm.so"
out=$("$run" -- sh -c "$show" 2>/dev/null)
[ "$out" = "$t/tree/config/uroce.conf|$t/tree/build/verbs_shim/liburoce-verbs.so:$t/tree/build/verbs_shim/rdmacm/liburoce-rdmacm.so" ]
check "liburoce-rdmacm.so preloaded after the verbs shim" $? "$out"
out=$("$run" --no-rdmacm -- sh -c "$show" 2>/dev/null)
[ "$out" = "$t/tree/config/uroce.conf|$t/tree/build/verbs_shim/liburoce-verbs.so" ]
check "--no-rdmacm: the verbs shim alone" $? "$out"
out=$(UROCE_CONFIG=client.conf "$run" -- sh -c "$show" 2>/dev/null)
[ "${out%%|*}" = "$t/client.conf" ]
check "\$UROCE_CONFIG before the tree's config (made absolute)" $? "$out"
out=$(UROCE_CONFIG=/nonexistent "$run" --config client.conf -- sh -c "$show" 2>/dev/null)
[ "${out%%|*}" = "$t/client.conf" ]
check "--config before \$UROCE_CONFIG" $? "$out"

one_line() {  # one_line EXPECTED-GLOB ARGS...: exit 1, one line matching, the program not run
  local want=$1; shift
  rm -f "$t/started"
  local out rc
  out=$("$run" "$@" -- touch "$t/started" 2>&1); rc=$?
  [ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && [[ "$out" == $want ]] && [ ! -e "$t/started" ]
  local r=$?
  [ $r -eq 0 ] || echo "   rc $rc: $out"
  return $r
}
printf 'eal = -l 0 --no-huge\nname = x\nmtu = 4000\n' > "$t/bad.conf"
one_line "uroce-run: $t/bad.conf:3: key 'mtu' = '4000': path mtu must be *" --config "$t/bad.conf"
check "malformed value: one line naming file, line and key" $? ""
printf 'eal = -l 0\nmtu_size = 1024\n' > "$t/bad2.conf"
UROCE_CONFIG=$t/bad2.conf one_line "uroce-run: $t/bad2.conf:2: unknown key 'mtu_size'*"
check "unknown key (from \$UROCE_CONFIG): one line" $? ""
one_line "uroce-run: config file $t/none.conf (--config) not found" --config "$t/none.conf"
check "missing --config file" $? ""
one_line "uroce-run: config file $t (--config) is not a regular file" --config "$t"
check "a directory as config" $? ""
rm "$t/tree/config/uroce.conf"
if [ ! -e /etc/uroce/uroce.conf ]; then
  one_line "uroce-run: no config: *$t/tree/config/uroce.conf*/etc/uroce/uroce.conf*"
  check "no config anywhere: one line naming the defaults" $? ""
fi

out=$("$run" --help); rc=$?
[ $rc -eq 0 ] && [[ "$out" == "uroce-run [--config FILE | --netdev IFACE]"*"/etc/uroce/uroce.conf"* ]]
check "--help" $? "rc $rc: $out"
"$run" > /dev/null 2>&1
[ $? -eq 2 ]
check "no command: usage, exit 2" $? ""

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all passed"
