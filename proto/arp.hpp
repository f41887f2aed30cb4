// ARP for IPv4 over Ethernet (RFC 826): the 28-byte packet after the Ethernet header
// (ethertype 0x0806). Same conventions as headers.hpp: the caller guarantees kSize bytes.
#pragma once
#include <cstdint>
#include <cstring>

#include "proto/headers.hpp"

namespace uroce::proto {

inline constexpr uint16_t kArpHwEthernet = 1;
inline constexpr uint16_t kArpRequest = 1;
inline constexpr uint16_t kArpReply = 2;

//  bytes 0-1   hardware type (1 = Ethernet)     bytes 8-13   sender hardware address
//  bytes 2-3   protocol type (0x0800 = IPv4)    bytes 14-17  sender protocol address
//  byte  4     hardware address length (6)      bytes 18-23  target hardware address
//  byte  5     protocol address length (4)      bytes 24-27  target protocol address
//  bytes 6-7   operation (1 request, 2 reply)
template <typename Byte>
struct ArpView : ViewBase<Byte> {
  UROCE_VIEW_CTOR(ArpView);
  static constexpr size_t kSize = 28;
  uint16_t hw_type() const { return load_be16(p_); }
  uint16_t proto_type() const { return load_be16(p_ + 2); }
  uint8_t hw_len() const { return p_[4]; }
  uint8_t proto_len() const { return p_[5]; }
  uint16_t oper() const { return load_be16(p_ + 6); }
  const uint8_t* sha() const { return p_ + 8; }
  const uint8_t* spa() const { return p_ + 14; }
  const uint8_t* tha() const { return p_ + 18; }
  const uint8_t* tpa() const { return p_ + 24; }
  // The only kind uroce speaks: Ethernet hardware addresses, IPv4 protocol addresses.
  bool is_ethernet_ipv4() const {
    return hw_type() == kArpHwEthernet && proto_type() == kEtherTypeIpv4 && hw_len() == 6 && proto_len() == 4;
  }

  // Hardware type, protocol type and the two lengths for Ethernet / IPv4.
  void set_ethernet_ipv4() requires kMutable {
    store_be16(p_, kArpHwEthernet);
    store_be16(p_ + 2, kEtherTypeIpv4);
    p_[4] = 6;
    p_[5] = 4;
  }
  void set_oper(uint16_t v) requires kMutable { store_be16(p_ + 6, v); }
  void set_sha(const uint8_t* mac) requires kMutable { std::memcpy(p_ + 8, mac, 6); }
  void set_spa(const uint8_t* ip) requires kMutable { std::memcpy(p_ + 14, ip, 4); }
  void set_tha(const uint8_t* mac) requires kMutable { std::memcpy(p_ + 18, mac, 6); }
  void set_tpa(const uint8_t* ip) requires kMutable { std::memcpy(p_ + 24, ip, 4); }
};

}  // namespace uroce::proto
