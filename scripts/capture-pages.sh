#!/usr/bin/env bash
# capture-pages.sh [--build DIR] [--out DIR] [--all]
# Makes the click-through page (uroce-dissect --html) of each reference capture, and an index:
#   - docs/captures/*.pcap (uroce's own) and ../shared/golden/rxe/*.pcap (Linux rxe in the lab):
#     OUT/NAME.html (OUT defaults to docs/captures/html), committed;
#   - with --all also the golden captures of other origins (tutorial/, hardware/: third-party
#     data under their own licences, see ../shared/golden/INDEX.md), for reading, not committing.
# OUT/README.md lists the pages with each capture's summary line and the events it holds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=$root/build
out=$root/docs/captures/html
all=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --all) all=1; shift ;;
    *) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
dissect=$build/tools/dissect/uroce-dissect
[ -x "$dissect" ] || { echo "capture-pages: $dissect is missing: build first" >&2; exit 2; }
golden=$root/../shared/golden
mkdir -p "$out"
caps=("$root"/docs/captures/*.pcap "$golden"/rxe/*.pcap)
[ $all = 1 ] && caps+=("$golden"/tutorial/*.pcap "$golden"/tutorial/nccl/*.pcap "$golden"/hardware/*.pcap)
index=$out/README.md
{
  echo "<!-- Made by \`scripts/capture-pages.sh\` on $(date -u +%F): do not edit. -->"
  echo "# Reference captures, page by page"
  echo
  echo "Each page is one capture as \`uroce-dissect --html\` shows it: the ladder (quiet runs folded,"
  echo "click a band to unfold), and for the selected frame its line, its fields and its bytes. Keys:"
  echo "j/k (or the arrows) next and previous frame, n/p next and previous event. The pages need no"
  echo "network: open them from the file system. Remake them with \`scripts/capture-pages.sh\`."
  echo
  echo "| capture | origin | frames | events |"
  echo "|---|---|---|---|"
} > "$index"
for cap in "${caps[@]}"; do
  [ -f "$cap" ] || continue
  case $cap in
    "$root"/docs/captures/*) origin="uroce (docs/captures)"; name=$(basename "${cap%.*}") ;;
    "$golden"/rxe/*) origin="Linux rxe, lab (golden/rxe)"; name=rxe-$(basename "${cap%.*}") ;;
    *) origin="golden/${cap#"$golden"/}"; name=$(echo "${cap#"$golden"/}" | sed 's/\.pcap.*$//; s#/#-#g') ;;
  esac
  # Exit 1 is a capture holding a bad ICRC or a malformed frame: the page shows it.
  "$dissect" --html "$out/$name.html" "$cap" > /dev/null || [ $? = 1 ]
  last=$("$dissect" "$cap" | tail -1 || true)
  events=$(python3 - "$out/$name.html" <<'PY'
import json, re, sys
s = open(sys.argv[1]).read()
d = json.loads(re.search(r'<script id="uroce-data" type="application/json">(.*?)</script>', s, re.S).group(1))
m = d["summary"]
parts = [f"{m[k]} {w}" for k, w in (("retransmissions", "resent"), ("seq_naks", "sequence NAK"),
         ("rnr_naks", "RNR NAK"), ("other_naks", "other NAK"), ("cnps", "CNP"), ("lost", "not seen"),
         ("icrc_bad", "bad ICRC"), ("malformed", "malformed")) if m[k]]
print(", ".join(parts) or "none")
PY
)
  echo "| [$(basename "$cap")]($name.html) | $origin | ${last%% frames*} | $events |" >> "$index"
  echo "page $out/$name.html"
done
echo "capture-pages: index $index"
