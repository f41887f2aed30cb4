#!/usr/bin/env bash
# page-shot.sh PAGE.html[#HASH] OUT.png [WIDTHxHEIGHT]
# A screenshot of a page of uroce-dissect --html in headless Chromium (Debian's chromium), e.g.
#   scripts/page-shot.sh 'docs/learn/html/go-back-n.html#focus=loss' docs/images/page-go-back-n.png
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
page=$1 out=$2 size=${3:-1600x1000}
file=${page%%#*}; hash=""; [ "$file" != "$page" ] && hash="#${page#*#}"
[ -f "$file" ] || { echo "page-shot: $file: no such page" >&2; exit 2; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
timeout 120 chromium --headless=new --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$profile" \
  --hide-scrollbars --virtual-time-budget=5000 --window-size="${size/x/,}" --screenshot="$(realpath -m "$out")" \
  "file://$(realpath "$file")$hash" 2>/dev/null >/dev/null
[ -s "$out" ] && echo "page-shot: $out"
