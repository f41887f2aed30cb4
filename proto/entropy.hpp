// UDP source port for ECMP entropy. RoCEv2 puts a per-flow value in the UDP source port so
// switches spread QPs across paths; the range 0xC000-0xFFFF is the one rxe and ConnectX use.
#pragma once
#include <cstdint>

namespace uroce::proto {

inline constexpr uint16_t kEntropyPortBase = 0xC000;

// Folds the 24-bit local and remote QP numbers into 14 bits (the kernel's flow-label fold:
// (fl & 0x3fff) ^ (fl >> 14)), then sets the two top bits.
constexpr uint16_t udp_source_port(uint32_t local_qpn, uint32_t remote_qpn = 0) {
  uint64_t v = uint64_t(local_qpn & 0xFFFFFF) * uint64_t(remote_qpn & 0xFFFFFF ? remote_qpn & 0xFFFFFF : 1);
  uint32_t fl = uint32_t(v ^ (v >> 20) ^ (v >> 40)) & 0xFFFFF;  // a 20-bit flow label
  return uint16_t(((fl & 0x3FFF) ^ (fl >> 14)) | kEntropyPortBase);
}

static_assert(udp_source_port(0x11) >= 0xC000);
static_assert(udp_source_port(0x11, 0x12) != udp_source_port(0x12, 0x13));

}  // namespace uroce::proto
