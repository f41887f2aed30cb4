#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the demo.
# Until the DPDK data path lands, the demo is uroce-dissect reading real RoCEv2 traffic
# captured from Linux rxe (../shared/golden), with the byte-level header layout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build >/dev/null
golden=${UROCE_GOLDEN:-../shared/golden}
echo "== uroce-dissect --bytes $golden/rxe/write_small.pcap"
./build/proto/dissect/uroce-dissect --bytes "$golden/rxe/write_small.pcap"
echo
echo "== uroce-dissect $golden/rxe/send_rnr_nak.pcap"
./build/proto/dissect/uroce-dissect "$golden/rxe/send_rnr_nak.pcap"
