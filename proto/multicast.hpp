// Multicast on RoCEv2 (IBA annex A17.4.5, as rdma_cm and rxe use it): a group is an IP
// multicast address; its GID is that address as a GID (IPv4 224.0.0.0/4 mapped as
// ::ffff:a.b.c.d, IPv6 ff00::/8 as it is); a datagram to the group goes to destination QP
// 0xFFFFFF, to the group's IP address, and on Ethernet to the group's MAC:
//   IPv4 (RFC 1112 6.4):  01:00:5e and the low 23 bits of the address
//   IPv6 (RFC 2464 7):    33:33 and the low 32 bits of the address
#pragma once
#include <cstdint>
#include <cstring>

#include "proto/packet.hpp"

namespace uroce::proto {

inline constexpr uint32_t kMulticastQpn = 0xFFFFFF;  // IBA 9.2: the destination QP of a multicast datagram

// Is `g` the GID of a multicast group (IPv4-mapped 224.0.0.0/4, or IPv6 ff00::/8)?
inline bool is_multicast_gid(const Ip6& g) {
  if (gid_is_v4mapped(g)) return (g[12] & 0xf0) == 0xe0;
  return g[0] == 0xff;
}

// The Ethernet MAC of multicast group `g` (is_multicast_gid).
inline Mac multicast_mac(const Ip6& g) {
  Mac m{};
  if (gid_is_v4mapped(g)) {
    m = {0x01, 0x00, 0x5e, uint8_t(g[13] & 0x7f), g[14], g[15]};
  } else {
    m[0] = m[1] = 0x33;
    std::memcpy(m.data() + 2, g.data() + 12, 4);
  }
  return m;
}

}  // namespace uroce::proto
