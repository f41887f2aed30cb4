#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the demo:
#  1. two uroce endpoints on this machine, joined by a DPDK memif link (no NIC, no
#     namespaces), print perftest's RDMA WRITE bandwidth table over a sweep of sizes;
#  2. uroce-dissect reads real RoCEv2 traffic captured from Linux rxe (../shared/golden) and
#     shows the byte-level layout of every header.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build >/dev/null
echo "== RDMA WRITE over memif: two uroce-perf processes (scripts/demo-memif.sh)"
bash scripts/demo-memif.sh build
golden=${UROCE_GOLDEN:-../shared/golden}
if [ -d "$golden" ]; then
  echo
  echo "== uroce-dissect --bytes $golden/rxe/write_small.pcap (Linux rxe's own frames)"
  ./build/tools/dissect/uroce-dissect --bytes "$golden/rxe/write_small.pcap"
fi
