#include "proto/icrc.hpp"

#include <array>
#include <cstring>

#include "proto/headers.hpp"

#ifdef UROCE_HAVE_ISAL
#include <isa-l/crc.h>
#endif

namespace uroce::proto {
namespace {

constexpr uint32_t kPoly = 0xEDB88320u;  // reflected 0x04C11DB7

struct Tables {
  uint32_t t[8][256];
};

constexpr Tables make_tables() {
  Tables tb{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    tb.t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (int s = 1; s < 8; ++s) tb.t[s][i] = (tb.t[s - 1][i] >> 8) ^ tb.t[0][tb.t[s - 1][i] & 0xFF];
  return tb;
}

constexpr Tables kTables = make_tables();

}  // namespace

uint32_t crc32_bytewise(uint32_t crc, const uint8_t* p, size_t len) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < len; ++i) c = kTables.t[0][(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t crc32_slice8(uint32_t crc, const uint8_t* p, size_t len) {
  uint32_t c = ~crc;
  while (len >= 8) {
    uint32_t lo = c ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
    c = kTables.t[7][lo & 0xFF] ^ kTables.t[6][(lo >> 8) & 0xFF] ^ kTables.t[5][(lo >> 16) & 0xFF] ^
        kTables.t[4][lo >> 24] ^ kTables.t[3][p[4]] ^ kTables.t[2][p[5]] ^ kTables.t[1][p[6]] ^
        kTables.t[0][p[7]];
    p += 8;
    len -= 8;
  }
  while (len--) c = kTables.t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t crc32(uint32_t crc, const uint8_t* data, size_t len) {
#ifdef UROCE_HAVE_ISAL
  return crc32_gzip_refl(crc, data, len);
#else
  return crc32_slice8(crc, data, len);
#endif
}

const char* crc32_backend() {
#ifdef UROCE_HAVE_ISAL
  return "isa-l";
#else
  return "slice-by-8";
#endif
}

namespace {

// Sets the fields the ICRC does not cover to ones (the one definition of the mask, used on a
// copy by icrc_compute() and in place by icrc_compute_inplace()). `ip` is the IP header.
inline void mask_variant(uint8_t* ip, size_t ip_header_len) {
  if ((ip[0] >> 4) == 4) {
    ip[1] = 0xFF;                 // TOS: DSCP and ECN
    ip[8] = 0xFF;                 // TTL
    ip[10] = ip[11] = 0xFF;       // header checksum
  } else {
    ip[0] |= 0x0F;                // traffic class, low nibble
    ip[1] = ip[2] = ip[3] = 0xFF; // traffic class high nibble + flow label
    ip[7] = 0xFF;                 // hop limit
  }
  uint8_t* udp = ip + ip_header_len;
  udp[6] = udp[7] = 0xFF;         // UDP checksum
  uint8_t* bth = udp + 8;
  bth[4] = 0xFF;                  // FECN, BECN, reserved
}

}  // namespace

uint32_t icrc_compute(const uint8_t* l3, size_t len, size_t ip_header_len) {
  // The masked copy of the variant headers: 8 x 0xFF, IP (up to 60), UDP (8), BTH (12). A
  // small packet is copied whole, so that one CRC call covers it (calls cost more than bytes).
  constexpr size_t kWhole = 256;
  alignas(64) std::array<uint8_t, 8 + 60 + 8 + 12 + kWhole> hdr;
  const size_t fixed = ip_header_len + UdpView<const uint8_t>::kSize + BthView<const uint8_t>::kSize;
  const size_t copied = len - fixed <= kWhole ? len : fixed;
  std::memset(hdr.data(), 0xFF, 8);
  std::memcpy(hdr.data() + 8, l3, copied);
  mask_variant(hdr.data() + 8, ip_header_len);
  uint32_t c = crc32(0, hdr.data(), 8 + copied);
  return copied == len ? c : crc32(c, l3 + fixed, len - fixed);
}

uint32_t icrc_compute_inplace(uint8_t* l3, size_t len, size_t ip_header_len) {
  // Mask in the frame itself, with the 8 bytes before the IP header (the end of the Ethernet
  // header) standing in for the masked LRH; one CRC call over all of it; then put back what was
  // there. No copy of the packet.
  const size_t fixed = ip_header_len + UdpView<const uint8_t>::kSize + BthView<const uint8_t>::kSize;
  uint8_t saved[8 + 60 + 8 + 12];
  uint8_t* const start = l3 - 8;
  std::memcpy(saved, start, 8 + fixed);
  std::memset(start, 0xFF, 8);
  mask_variant(l3, ip_header_len);
  const uint32_t c = crc32(0, start, 8 + len);
  std::memcpy(start, saved, 8 + fixed);
  return c;
}

}  // namespace uroce::proto
