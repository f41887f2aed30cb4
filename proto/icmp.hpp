// ICMP (RFC 792) and ICMPv6 (RFC 4443) echo, and IPv6 neighbour discovery (RFC 4861):
// neighbour solicitation and advertisement with their link-layer address options. Same
// conventions as headers.hpp: a view never checks bounds, the caller guarantees kSize bytes;
// find_nd_option() is the one place that walks the options and stays inside its span.
// Checksums: inet_checksum() (proto/checksum.hpp) for ICMP, icmp6_checksum() below for ICMPv6.
#pragma once
#include <cstdint>
#include <cstring>
#include <span>

#include "proto/checksum.hpp"
#include "proto/headers.hpp"

namespace uroce::proto {

inline constexpr uint8_t kIcmpEchoReply = 0;
inline constexpr uint8_t kIcmpEchoRequest = 8;
inline constexpr uint8_t kIcmp6EchoRequest = 128;
inline constexpr uint8_t kIcmp6EchoReply = 129;
inline constexpr uint8_t kIcmp6NeighbourSolicit = 135;
inline constexpr uint8_t kIcmp6NeighbourAdvert = 136;
inline constexpr uint8_t kNdOptSourceLinkAddr = 1;
inline constexpr uint8_t kNdOptTargetLinkAddr = 2;
inline constexpr uint8_t kNdHopLimit = 255;  // ND messages are sent, and accepted, with 255 only
// Neighbour advertisement flags (the 32-bit word at offset 4).
inline constexpr uint32_t kNaRouter = 0x80000000, kNaSolicited = 0x40000000, kNaOverride = 0x20000000;

// ---- ICMP / ICMPv6 header with the echo fields (8 bytes; same layout in both) ---------------
//  byte 0 type, byte 1 code, bytes 2-3 checksum, bytes 4-5 identifier, bytes 6-7 sequence
template <typename Byte>
struct IcmpView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(IcmpView);
  static constexpr size_t kSize = 8;
  uint8_t type() const { return p_[0]; }
  uint8_t code() const { return p_[1]; }
  uint16_t checksum() const { return load_be16(p_ + 2); }
  uint16_t identifier() const { return load_be16(p_ + 4); }
  uint16_t sequence() const { return load_be16(p_ + 6); }
  void set_type(uint8_t v) requires kMutable { p_[0] = v; }
  void set_code(uint8_t v) requires kMutable { p_[1] = v; }
  void set_checksum(uint16_t v) requires kMutable { store_be16(p_ + 2, v); }
  void set_identifier(uint16_t v) requires kMutable { store_be16(p_ + 4, v); }
  void set_sequence(uint16_t v) requires kMutable { store_be16(p_ + 6, v); }
};

// ---- Neighbour solicitation / advertisement (24 bytes, then options) ------------------------
//  byte 0 type (135 NS, 136 NA), byte 1 code (0), bytes 2-3 checksum,
//  bytes 4-7 NA: R S O flags then reserved; NS: reserved, bytes 8-23 target address
template <typename Byte>
struct NdView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(NdView);
  static constexpr size_t kSize = 24;
  uint8_t type() const { return p_[0]; }
  uint8_t code() const { return p_[1]; }
  uint16_t checksum() const { return load_be16(p_ + 2); }
  uint32_t flags() const { return load_be32(p_ + 4); }
  bool router() const { return flags() & kNaRouter; }
  bool solicited() const { return flags() & kNaSolicited; }
  bool override_flag() const { return flags() & kNaOverride; }
  const uint8_t* target() const { return p_ + 8; }
  void set_type(uint8_t v) requires kMutable { p_[0] = v; }
  void set_code(uint8_t v) requires kMutable { p_[1] = v; }
  void set_checksum(uint16_t v) requires kMutable { store_be16(p_ + 2, v); }
  void set_flags(uint32_t v) requires kMutable { store_be32(p_ + 4, v); }
  void set_target(const uint8_t* a) requires kMutable { std::memcpy(p_ + 8, a, 16); }
};

// ---- ND option: type, length in units of 8 bytes, data (the link-layer address options are 8
// bytes: type 1 source / 2 target, length 1, a 6-byte MAC) ----------------------------------
template <typename Byte>
struct NdOptionView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(NdOptionView);
  static constexpr size_t kSize = 8;  // one unit; a link-layer address option exactly
  uint8_t type() const { return p_[0]; }
  uint8_t units() const { return p_[1]; }
  size_t length() const { return size_t(units()) * 8; }
  const uint8_t* lladdr() const { return p_ + 2; }
  void set_lladdr_option(uint8_t type, const uint8_t* mac) requires kMutable {
    p_[0] = type;
    p_[1] = 1;
    std::memcpy(p_ + 2, mac, 6);
  }
};

// The first option of `type` among the options (the bytes after the 24-byte NS/NA), or nullptr.
// Stops at an option of length 0 (malformed, RFC 4861 4.6) or one that would run past the end.
inline const uint8_t* find_nd_option(std::span<const uint8_t> options, uint8_t type) {
  size_t o = 0;
  while (options.size() - o >= NdOptionView<const uint8_t>::kSize) {
    NdOptionView<const uint8_t> opt(options.data() + o);
    if (opt.units() == 0 || opt.length() > options.size() - o) return nullptr;
    if (opt.type() == type) return options.data() + o;
    o += opt.length();
  }
  return nullptr;
}

// The solicited-node multicast address ff02::1:ffXX:XXXX of `addr` (RFC 4291 2.7.1), and the
// Ethernet multicast MAC 33:33:XX:XX:XX:XX of an IPv6 multicast address (RFC 2464 7).
inline void solicited_node(const uint8_t* addr, uint8_t* out) {
  static constexpr uint8_t kPrefix[13] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff};
  std::memcpy(out, kPrefix, 13);
  std::memcpy(out + 13, addr + 13, 3);
}
inline bool is_link_local_multicast(const uint8_t* a) { return a[0] == 0xff && a[1] == 0x02; }
inline void ipv6_multicast_mac(const uint8_t* mcast, uint8_t* mac) {
  mac[0] = mac[1] = 0x33;
  std::memcpy(mac + 2, mcast + 12, 4);
}
inline bool is_ipv6_multicast_mac(const uint8_t* mac) { return mac[0] == 0x33 && mac[1] == 0x33; }

// ICMPv6 checksum of the `len`-byte message `msg` (its checksum field zero) carried by the IPv6
// header at `ip6`: over the pseudo header of that header's addresses (RFC 4443 2.3).
inline uint16_t icmp6_checksum(const uint8_t* ip6, const uint8_t* msg, size_t len) {
  Ipv6View<const uint8_t> ip(ip6);
  return l4_checksum({ip.src(), 16}, {ip.dst(), 16}, kIpProtoIcmp6, msg, len);
}

}  // namespace uroce::proto
