#!/usr/bin/env bash
# Installs the Debian 12 packages uroce builds, tests, packages (debian/) and demos with.
# Idempotent: only missing packages are installed. Needs root (or sudo).
set -euo pipefail

pkgs=(
  build-essential meson ninja-build pkg-config clang
  libdpdk-dev dpdk dpdk-dev
  libibverbs-dev ibverbs-utils perftest rdma-core
  librdmacm-dev rdmacm-utils
  ucx-utils openmpi-bin libopenmpi-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcap-dev libisal-dev libmnl-dev libbpf-dev libxdp-dev
  tshark python3-scapy python3
  iproute2 iputils-ping tcpdump
  dpkg-dev debhelper lintian
  # browser test of uroce-dissect --html (tests/dissect/test_html.py)
  chromium chromium-driver python3-selenium
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# wireshark-common asks whether non-root users may capture: answer no, quietly.
echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
