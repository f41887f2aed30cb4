// The Internet checksum (RFC 1071): the one routine uroce uses for IPv4 headers, UDP, ICMP and
// ICMPv6. A one's-complement sum over 16-bit big-endian words that can be fed in pieces (an odd
// piece carries its last byte over to the next), plus the pseudo headers UDP and ICMPv6 add.
//
//   OnesSum().add(hdr, len).checksum()     the value to store in a zeroed checksum field
//   OnesSum().add(hdr, len).verifies()     true when the bytes already carry a good checksum
#pragma once
#include <cstddef>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>

namespace uroce::proto {

class OnesSum {
 public:
  // Adds bytes in wire order. Pieces may have any length: the byte stream is what counts.
  OnesSum& add(const uint8_t* p, size_t len);  // inline below: headers of fixed size fold into a few loads
  OnesSum& add(std::span<const uint8_t> s) { return add(s.data(), s.size()); }
  // Adds a 16- or 32-bit value as if it were in the stream in network order (at an even offset).
  OnesSum& add16(uint16_t v) {
    sum_ += v;
    return *this;
  }
  OnesSum& add32(uint32_t v) { return add16(uint16_t(v >> 16)).add16(uint16_t(v)); }

  // The folded 16-bit one's-complement sum.
  uint16_t folded() const;
  // Its complement: what goes in the checksum field (computed with the field zero).
  uint16_t checksum() const { return uint16_t(~folded()); }
  // Summed over data that includes its checksum field: true when the checksum is right.
  bool verifies() const { return folded() == 0xFFFF; }

 private:
  uint64_t sum_ = 0;
  bool odd_ = false;  // the stream so far has an odd length: the next byte is a low half
};

inline OnesSum& OnesSum::add(const uint8_t* p, size_t len) {
  size_t i = 0;
  if (odd_ && len > 0) {
    sum_ += p[0];  // the low half of the word the previous piece began
    i = 1;
    odd_ = false;
  }
  // Eight bytes at a time in the machine's byte order: the one's-complement sum does not depend
  // on byte order (RFC 1071 2.B), so the folded result is swapped to network order once.
  uint64_t native = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    native += (w & 0xFFFFFFFFu) + (w >> 32);
  }
  if (i + 4 <= len) {  // an IPv4 header (20 bytes) ends here: no 16-bit steps
    uint32_t w;
    std::memcpy(&w, p + i, 4);
    native += w;
    i += 4;
  }
  while (native >> 16) native = (native & 0xFFFF) + (native >> 16);
  if constexpr (std::endian::native == std::endian::little) sum_ += uint16_t(native >> 8 | native << 8);
  else sum_ += native;
  for (; i + 1 < len; i += 2) sum_ += uint32_t(p[i]) << 8 | p[i + 1];
  if (i < len) {
    sum_ += uint32_t(p[i]) << 8;
    odd_ = true;
  }
  return *this;
}

inline uint16_t OnesSum::folded() const {
  uint64_t s = sum_;
  while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
  return uint16_t(s);
}

// RFC 1071 checksum of one block (an IPv4 header, an ICMP message): 0 when it verifies.
inline uint16_t inet_checksum(const uint8_t* p, size_t len) { return OnesSum().add(p, len).checksum(); }

// The pseudo header of UDP (RFC 768) or ICMPv6 (RFC 4443, RFC 8200 8.1) over IPv4 or IPv6:
// source and destination address (4 or 16 bytes each), the upper-layer protocol and length.
// Add the upper-layer message to it.
OnesSum pseudo_header(std::span<const uint8_t> src, std::span<const uint8_t> dst, uint8_t protocol,
                      uint32_t upper_len);

// Checksum of an upper-layer message (its checksum field zero) behind `pseudo_header`.
// UDP sends a computed 0 as 0xFFFF (0 means "no checksum"): udp_checksum does that.
inline uint16_t l4_checksum(std::span<const uint8_t> src, std::span<const uint8_t> dst, uint8_t protocol,
                            const uint8_t* msg, size_t len) {
  return pseudo_header(src, dst, protocol, uint32_t(len)).add(msg, len).checksum();
}
inline uint16_t udp_checksum(std::span<const uint8_t> src, std::span<const uint8_t> dst, const uint8_t* udp,
                             size_t len) {
  const uint16_t c = l4_checksum(src, dst, 17, udp, len);
  return c == 0 ? 0xFFFF : c;
}
// True when a message that carries its checksum verifies against the pseudo header.
inline bool l4_checksum_ok(std::span<const uint8_t> src, std::span<const uint8_t> dst, uint8_t protocol,
                           const uint8_t* msg, size_t len) {
  return pseudo_header(src, dst, protocol, uint32_t(len)).add(msg, len).verifies();
}

}  // namespace uroce::proto
