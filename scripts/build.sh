#!/usr/bin/env bash
# Configures (once) and builds one meson build directory.
#   scripts/build.sh [DIR] [meson setup options...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" --werror "$@"
fi
ninja -C "$dir"
