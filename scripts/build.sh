#!/usr/bin/env bash
# Configures (once) and builds one meson build directory.
#   scripts/build.sh [DIR] [meson setup options...]
#   UROCE_SUITES="proto engine" scripts/build.sh DIR ...   # only what those suites' tests need
# With UROCE_SUITES only the programs the suites' tests run and the targets they depend on are
# built (scripts/suite-targets.py, from `meson introspect --tests`); run them with
# `meson test -C DIR --no-rebuild --suite ...`.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" --werror "$@"
fi
if [ -n "${UROCE_SUITES:-}" ]; then
  ninja -C "$dir" build.ninja  # meson's regeneration first, if a meson.build changed: a new test counts
  targets=$(/usr/bin/python3 scripts/suite-targets.py "$dir" $UROCE_SUITES)
  echo "build.sh: $(wc -l <<<"$targets") targets for suites $UROCE_SUITES ($(ninja -C "$dir" -n $targets | tail -1 | grep -o '^\[[0-9/]*\]' || echo 'nothing to do'); all: $(ninja -C "$dir" -n | tail -1 | grep -o '^\[[0-9/]*\]' || echo 'nothing to do'))"
  ninja -C "$dir" $targets
else
  ninja -C "$dir"
fi
