#include "proto/checksum.hpp"

#include <bit>
#include <cstring>

namespace uroce::proto {

OnesSum pseudo_header(std::span<const uint8_t> src, std::span<const uint8_t> dst, uint8_t protocol,
                      uint32_t upper_len) {
  // IPv4: src, dst, zero, protocol, 16-bit length. IPv6: src, dst, 32-bit length, three zero
  // bytes, next header. Both sum to the same words when the length fits in 16 bits.
  OnesSum s;
  s.add(src).add(dst).add32(upper_len).add16(protocol);
  return s;
}

}  // namespace uroce::proto
