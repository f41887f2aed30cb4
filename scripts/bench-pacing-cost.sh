#!/usr/bin/env bash
# What the pacing code costs a QP without congestion control (issue 33: "< 2% of its 64 B message
# rate"). Builds a second tree, this commit with the reaction point's tests compiled out of the
# data path (every `qp.cc` test in engine/requester.cpp, responder_ack.cpp and recovery.cpp made
# `false`: no pacer check per packet, no RTT hand-off, no pacer timer), and measures both trees:
#   1. instructions per 64 B WRITE and SEND message in the engine bench (callgrind, exact:
#      scripts/profile-engine.sh), A = without the code, B = this tree;
#   2. scripts/bench-ab.sh: the engine bench pinned and unpinned, and uroce-perf's 64 B WRITE
#      rate over memif (release builds), alternately, ROUNDS rounds (default 5).
#
#   scripts/bench-pacing-cost.sh [ROUNDS]     (needs root for memif; about 15 minutes with builds)
# The variant tree is /tmp/uroce-nopace (a git worktree of this commit). B is this tree as
# committed: the script refuses to run with uncommitted changes to tracked files.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
[ "$(id -u)" = 0 ] || { echo "needs root (memif)" >&2; exit 1; }
V=/tmp/uroce-nopace
here=$(pwd)
[ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "commit first: B is this tree as committed" >&2; exit 1; }
# The variant: a worktree at this commit with the tests compiled out (kept for the next run at
# the same commit; `git worktree remove --force /tmp/uroce-nopace` removes it).
if [ "$(git -C "$V" rev-parse HEAD 2>/dev/null)" != "$(git rev-parse HEAD)" ]; then
  git worktree remove --force "$V" 2>/dev/null || rm -rf "$V"
  git worktree prune
  git worktree add --detach "$V" HEAD >/dev/null
fi
git -C "$V" checkout -q -- engine
n=0
for f in engine/requester.cpp engine/responder_ack.cpp engine/recovery.cpp; do
  c=$(perl -ne '$n += () = /\bqp\.cc\b(?!->)/g; END { print $n + 0 }' "$V/$f")
  perl -pi -e 's/\bqp\.cc\b(?!->)/false/g' "$V/$f"
  n=$((n + c))
done
[ "$n" = 7 ] || { echo "expected 7 tests of qp.cc in the data path, found $n: update this script" >&2; exit 1; }
for t in "$V" "$here"; do
  [ -f "$t/build-bench/build.ninja" ] || meson setup "$t/build-bench" "$t" --buildtype=release -Db_ndebug=true >/dev/null
  ninja -C "$t/build-bench" bench/engine_bench bench/uroce-perf bench/uroce-pktgen > "$t/build-bench/pacing-cost.log" 2>&1 ||
    { tail -20 "$t/build-bench/pacing-cost.log" >&2; exit 1; }
done
# Both trees measured by this tree's scripts.
for s in bench-ab.sh bench-port.sh bench-lib.sh profile-engine.sh; do cp "scripts/$s" "$V/scripts/$s"; done

echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, commit $(git rev-parse --short HEAD)"
echo "# A = without the pacing code ($n tests of qp.cc compiled out), B = as built"
echo
echo "| engine bench, callgrind | A instructions per message | B instructions per message | B / A |"
echo "|---|---:|---:|---:|"
for f in BM_Write/64/ BM_Send/64/; do
  a=$( (cd "$V" && bash scripts/profile-engine.sh "$f" 1) | sed -n 's/.* \([0-9]*\) instructions per message/\1/p')
  b=$(bash scripts/profile-engine.sh "$f" 1 | sed -n 's/.* \([0-9]*\) instructions per message/\1/p')
  echo "| ${f%/} | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f", b / a }') |"
done
echo
PERF_BUILD=build-bench bash scripts/bench-ab.sh "$V" "$here" "$ROUNDS"
