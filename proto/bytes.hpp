// Big-endian loads and stores over raw bytes. Every wire field in uroce is read and
// written through these helpers: no bitfields, no casts of packet memory to structs.
#pragma once
#include <cstddef>
#include <cstdint>

namespace uroce::proto {

constexpr uint16_t load_be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
constexpr uint32_t load_be24(const uint8_t* p) { return uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2]; }
constexpr uint32_t load_be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
constexpr uint64_t load_be64(const uint8_t* p) { return uint64_t(load_be32(p)) << 32 | load_be32(p + 4); }

constexpr void store_be16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
constexpr void store_be24(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 16);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v);
}
constexpr void store_be32(uint8_t* p, uint32_t v) {
  store_be16(p, uint16_t(v >> 16));
  store_be16(p + 2, uint16_t(v));
}
constexpr void store_be64(uint8_t* p, uint64_t v) {
  store_be32(p, uint32_t(v >> 32));
  store_be32(p + 4, uint32_t(v));
}

// Little-endian 32-bit, used only for the ICRC trailer (the CRC goes on the wire LSB first).
constexpr uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
constexpr void store_le32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v >> 16);
  p[3] = uint8_t(v >> 24);
}

}  // namespace uroce::proto
