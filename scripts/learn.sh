#!/usr/bin/env bash
# learn.sh NAME|all [--build DIR] [--out DIR] [--check]
# Makes the lesson pages of docs/learn/ from traffic uroce makes itself: two uroce endpoints
# on memif, uroce-lesson through the verbs shim, the port's capture and fault injection,
# uroce-dissect (lines, bytes, ladder) and uroce-stat. Lessons: write-send, go-back-n, rnr,
# read-atomic, qp-states, drill-psn-gap, congestion. The texts are docs/learn/src/NAME.md (scripts/learn.py does the work).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
exec python3 "$here/learn.py" "$@"
