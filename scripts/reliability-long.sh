#!/usr/bin/env bash
# The long reliability run: N random RC operations (default 10^6) between two engines over
# the FakeLink with every fault (drop, duplicate, reorder, corrupt, delay) at RATE (default
# 5%), every byte verified. Prints operations, bytes verified, virtual and wall time, and
# the summed counters.
#   scripts/reliability-long.sh [N] [RATE] [MAX_SIZE] [sr]   (sr: selective repeat on at both ends)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh build >/dev/null
UROCE_LONG_OPS=${1:-1000000} UROCE_LONG_RATE=${2:-0.05} UROCE_LONG_MAX=${3:-1048576} \
  UROCE_LONG_SR=$([ "${4:-}" = sr ] && echo 1 || echo 0) \
  ./build/tests/engine/reliability_test --gtest_filter='Long.*' --gtest_brief=1
