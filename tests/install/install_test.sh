#!/bin/bash
# Suite install: the Debian package, built and used as a user would.
#  1. copies the source tree to a scratch folder and builds the package there
#     (dpkg-buildpackage -us -uc -b; the tree itself is not touched);
#  2. checks the package's file list, installs it with dpkg -i (dependencies must be there);
#  3. from the installed files only (/usr/bin, a working directory outside any source tree):
#     --help of every command, uroce-run's config errors (one line naming file and key),
#     uroce-run --config <installed memif example> -- ibv_devinfo, and a uroce-perf memif pair;
#  4. removes the package (dpkg -r) and the scratch folder, also on failure or timeout.
# Needs root (dpkg -i, DPDK); skips (77) without it, or if a uroce package is installed already.
#   install_test.sh SOURCE_ROOT
# On a machine shared by several builders: UROCE_BUILD_LOCK=FILE holds flock FILE during the
# package build, UROCE_NET_LOCK=FILE during the DPDK runs (each only while it is needed).
set -uo pipefail
root=$(cd "${1:?usage: install_test.sh SOURCE_ROOT}" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (dpkg -i, DPDK)"; exit 77; }
if dpkg-query -W -f='${Status}' uroce 2>/dev/null | grep -q "ok installed"; then
  echo "SKIP: a uroce package is installed on this machine already; not replacing it"
  exit 77
fi
for t in dpkg-buildpackage dh dpkg-deb ibv_devinfo; do
  command -v "$t" > /dev/null || { echo "FAIL: $t missing (bash scripts/install-deps.sh)"; exit 1; }
done

work=$(mktemp -d /tmp/uroce-install-test.XXXXXX)
installed=
pids=()
SOCK=/tmp/uroce-memif.sock
cleanup() {
  for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ -n "$installed" ]; then
    echo "+ dpkg -r uroce"
    dpkg -r uroce > "$work/dpkg-r.log" 2>&1 || { echo "dpkg -r failed:"; cat "$work/dpkg-r.log"; }
  fi
  rm -f "$SOCK"
  rm -rf "$work"
  # The shim's DPDK runtime folders (a file prefix per process) of processes that are gone.
  for d in /var/run/dpdk/uroce-shim-*; do
    [ -d "$d" ] && [ ! -e "/proc/${d##*-}" ] && rm -rf "$d"
  done
  return 0
}
trap cleanup EXIT
trap 'echo "FAIL: terminated"; exit 1' INT TERM

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

# ---- 1. build the package from a copy of the tree -----------------------------------------
src=$work/uroce
mkdir -p "$src"
if git -C "$root" rev-parse --git-dir > /dev/null 2>&1; then
  # Tracked and new files, as the tree is now (not build folders or other ignored files).
  (cd "$root" && git ls-files -z --cached --others --exclude-standard) |
    (cd "$root" && tar --null --ignore-failed-read -T - -cf -) | tar -C "$src" -xf -
else
  tar -C "$root" --exclude='./build*' --exclude='./obj-*' --exclude='./.git' -cf - . | tar -C "$src" -xf -
fi
# The package is built for this test only, which checks what it holds and that its programs
# run, not their speed: not optimized (DEB_BUILD_OPTIONS=noopt, -O0), its debug information at
# -g1 (appended after dpkg-buildflags' -g, the last level counts). dh builds with both cores
# already (ninja's default).
export DEB_BUILD_OPTIONS="noopt${DEB_BUILD_OPTIONS:+ $DEB_BUILD_OPTIONS}"
export DEB_CFLAGS_APPEND=-g1 DEB_CXXFLAGS_APPEND=-g1
echo "+ DEB_BUILD_OPTIONS=$DEB_BUILD_OPTIONS DEB_CXXFLAGS_APPEND=-g1 dpkg-buildpackage -us -uc -b (in $src)"
t0=$(date +%s)
locked() {  # locked LOCKFILE COMMAND...: COMMAND under flock LOCKFILE when LOCKFILE is set
  local l=$1; shift
  if [ -n "$l" ]; then flock "$l" "$@"; else "$@"; fi
}
if ! (cd "$src" && locked "${UROCE_BUILD_LOCK:-}" timeout 1200 dpkg-buildpackage -us -uc -b) > "$work/build.log" 2>&1; then
  tail -40 "$work/build.log"
  echo "FAIL: dpkg-buildpackage"
  exit 1
fi
deb=$(ls "$work"/uroce_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || { echo "FAIL: no .deb"; exit 1; }
echo "ok: built $(basename "$deb") in $(( $(date +%s) - t0 )) s"
[ -z "${UROCE_KEEP_DEB:-}" ] || cp "$deb" "$UROCE_KEEP_DEB/"   # UROCE_KEEP_DEB=DIR keeps a copy

if command -v lintian > /dev/null; then
  echo "+ lintian $(basename "$deb")"
  timeout 300 lintian --fail-on error "$deb" 2>&1 | grep -v "running with root privileges" | tee "$work/lintian.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "lintian reports errors"
fi

# ---- 2. its contents and dependencies -----------------------------------------------------
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' > "$work/files"
multi=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
grep -qE '^(/usr)?/lib/systemd/system/uroced@\.service$' "$work/files" || fail "package lacks the unit uroced@.service"
for f in /usr/sbin/uroced /usr/share/man/man8/uroced.8.gz \
         /usr/bin/uroce-run /usr/bin/uroce-perf /usr/bin/uroce-pktgen /usr/bin/uroce-dissect /usr/bin/uroce-stat \
         /usr/bin/uroce-drill /usr/bin/uroce-drill-agent /usr/share/uroce/drill/psn/gap.drill \
         /usr/lib/$multi/uroce/liburoce-verbs.so /usr/lib/$multi/uroce/roce_redirect.bpf.o /usr/libexec/uroce/uroce-check-config \
         /usr/share/uroce/examples/memif-server.conf /usr/share/uroce/examples/memif-client.conf \
         /usr/share/uroce/examples/README.md /usr/share/doc/uroce/copyright; do
  grep -qx "$f" "$work/files" || fail "package lacks $f"
done
grep -q '^/usr/share/doc/uroce/install.md' "$work/files" || fail "package lacks docs/install.md"
for c in uroce-run uroce-perf uroce-pktgen uroce-dissect uroce-stat uroce-drill uroce-drill-agent; do
  grep -qx "/usr/share/man/man1/$c.1.gz" "$work/files" || fail "package lacks the manual page of $c"
done
if grep -E 'bench$|_test$|/interop|/include/' "$work/files"; then fail "package has test, bench or header files"; fi
depends=$(dpkg-deb -f "$deb" Depends)
for d in libibverbs1 libpcap0.8 librte-eal23 librte-net-memif23 librte-mempool-ring23 python3; do
  [[ "$depends" == *"$d"* ]] || fail "Depends lacks $d: $depends"
done
[[ "$depends" == *libisal2* ]] || fail "Depends lacks libisal2 (the ICRC): $depends"
echo "ok: file list and Depends checked ($(wc -l < "$work/files") entries)"

# Installed only while it is used: the DPDK lock (if any) is taken first, released at exit.
if [ -n "${UROCE_NET_LOCK:-}" ]; then exec 9> "$UROCE_NET_LOCK" && flock 9; fi
echo "+ dpkg -i $(basename "$deb")"
if ! dpkg -i "$deb" > "$work/dpkg-i.log" 2>&1; then
  cat "$work/dpkg-i.log"
  installed=yes   # half-configured: remove it
  echo "FAIL: dpkg -i"
  exit 1
fi
installed=yes
ok "installed"

# ---- 3. from the installed files ----------------------------------------------------------
cd "$work"   # outside any source tree: nothing may come from $root
ex=/usr/share/uroce/examples
for c in uroce-run uroce-perf uroce-pktgen uroce-dissect uroce-stat uroce-drill uroce-drill-agent; do
  out=$(timeout 10 "/usr/bin/$c" --help 2>&1)
  rc=$?
  [ $rc -eq 0 ] && [[ "$out" == *usage*"$c"* || "$out" == *"$c ["* ]] || fail "$c --help (rc $rc): $out"
done
out=$(timeout 10 /usr/libexec/uroce/uroce-check-config --help 2>&1) || fail "uroce-check-config --help: $out"
out=$(timeout 10 /usr/sbin/uroced --help 2>&1) && [[ "$out" == *"usage: uroced"* ]] || fail "uroced --help: $out"
ok "--help of every command"
# uroce-drill finds its installed scenarios (share/uroce/drill) outside the source tree.
out=$(timeout 10 /usr/bin/uroce-drill --list 2>&1) && [[ "$out" == *"psn/gap"*" scenarios"* ]] || fail "uroce-drill --list: $out"
ok "uroce-drill --list: $(tail -1 <<<"$out")"

# uroce-run without a config anywhere: one line naming the default location.
out=$(env -u UROCE_CONFIG timeout 10 /usr/bin/uroce-run -- true 2>&1)
rc=$?
[ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && [[ "$out" == *"/etc/uroce/uroce.conf"* ]] ||
  fail "no config (rc $rc): $out"
# A malformed key: one line naming the file and the key; the program is not started.
sed 's/^mtu = 4096/mtu = 4000/' $ex/memif-server.conf > "$work/bad.conf"
out=$(timeout 10 /usr/bin/uroce-run --config "$work/bad.conf" -- touch "$work/started" 2>&1)
rc=$?
[ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && [[ "$out" == *"$work/bad.conf:"*"key 'mtu'"* ]] &&
  [ ! -e "$work/started" ] || fail "malformed key (rc $rc): $out"
out=$(timeout 10 /usr/bin/uroce-run --config "$work/absent.conf" -- true 2>&1)
[ $? -eq 1 ] && [[ "$out" == "uroce-run: config file $work/absent.conf (--config) not found" ]] ||
  fail "absent config: $out"
# The default location is used when UROCE_CONFIG is unset (it exists only during this check).
if [ ! -e /etc/uroce/uroce.conf ]; then
  mkdir -p /etc/uroce && cp "$work/bad.conf" /etc/uroce/uroce.conf
  out=$(env -u UROCE_CONFIG timeout 10 /usr/bin/uroce-run -- true 2>&1)
  rm -f /etc/uroce/uroce.conf; rmdir /etc/uroce 2>/dev/null
  [[ "$out" == "uroce-run: /etc/uroce/uroce.conf:"*"key 'mtu'"* ]] || fail "default config not read: $out"
fi
ok "uroce-run config errors"

# ibv_devinfo on uroce, through the installed uroce-run, library and example config.
out=$(timeout 60 /usr/bin/uroce-run --config $ex/memif-server.conf -- ibv_devinfo 2>&1)
rc=$?
if [ $rc -eq 0 ] && [[ "$out" == *"hca_id:"*"uroce-memif-s"* ]] && [[ "$out" == *PORT_ACTIVE* ]]; then
  ok "uroce-run --config $ex/memif-server.conf -- ibv_devinfo: $(printf '%s\n' "$out" | grep -E 'hca_id|state|link_layer' | tr -s ' \t' ' ' | paste -sd';')"
else
  fail "ibv_devinfo (rc $rc): $out"
fi

# A uroce-perf pair over memif, the installed binary and example configs.
rm -f "$SOCK"
opts=(--test write -s 65536 -n 2000 --timeout 40)
setsid /usr/bin/uroce-perf --config $ex/memif-server.conf "${opts[@]}" > "$work/srv.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do grep -q "@$SOCK" /proc/net/unix && break; sleep 0.05; done
timeout 60 /usr/bin/uroce-perf --config $ex/memif-client.conf "${opts[@]}" 127.0.0.1 > "$work/cli.log" 2>&1
crc=$?
srv_rc=124
for _ in $(seq 100); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.1; done
if ! kill -0 "${pids[0]}" 2>/dev/null; then wait "${pids[0]}"; srv_rc=$?; fi
if [ $crc -eq 0 ] && [ $srv_rc -eq 0 ] && grep -q "data verification: OK" "$work/cli.log" &&
   grep -q "data verification: OK" "$work/srv.log"; then
  ok "uroce-perf memif pair: $(grep -E '^ *65536 ' "$work/cli.log" | tr -s ' ')"
else
  echo "--- server (rc $srv_rc) ---"; cat "$work/srv.log"; echo "--- client (rc $crc) ---"; cat "$work/cli.log"
  fail "uroce-perf memif pair"
fi

# ---- 4. removal ---------------------------------------------------------------------------
cd /
if dpkg -r uroce > "$work/dpkg-r.log" 2>&1 && [ ! -e /usr/bin/uroce-run ] && [ ! -e /usr/share/uroce ]; then
  installed=
  ok "removed"
else
  cat "$work/dpkg-r.log"
  fail "dpkg -r left files"
fi
if [ $failures -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "all passed"
