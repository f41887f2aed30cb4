// The one header walker: where the headers of an Ethernet frame are, by its bytes alone.
//
// locate() follows Ethernet, up to two 802.1Q / 802.1ad tags (as parse() accepts), then by
// ethertype an ARP packet, a RoCE v1 GRH, or an IPv4 / IPv6 header and its upper-layer header
// (UDP and its ports, ICMP, ICMPv6). It checks only what it needs to find the next offset (IP
// version nibble, IHL, that each header it steps over is in the frame) and never reads outside
// the frame. It does not validate lengths, checksums or the ICRC: parse() does that for RoCEv2,
// the port's handlers for ARP and ICMP. The dissector, the port's classifier and the golden
// test all use it, so they agree on what a RoCE frame is.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "proto/packet.hpp"

namespace uroce::proto {

struct Located {
  // Ok, or the first thing that stopped the walk: Truncated (with `layer`: Ethernet, Vlan,
  // Ipv4, Ipv6, Udp), BadIpVersion (the version nibble disagrees with the ethertype) or
  // BadIpv4Header (IHL < 5). Offsets found before the stop stay valid.
  ParseResult result;
  uint8_t vlan_count = 0;       // tags stepped over (0 to 2)
  uint16_t outer_tci = 0;       // the outer tag's TCI, when vlan_count > 0
  uint16_t ethertype = 0;       // after the tags; 0 when the frame ends before it
  size_t l3 = 0;                // the ARP packet, IP header or GRH: 14 + 4 per tag
  uint8_t ip_version = 0;       // 4 or 6 once the whole IP header is in the frame
  size_t ip_header_len = 0;     // IHL * 4, or 40 (IPv6 extension headers are not followed)
  uint8_t ip_proto = 0;         // IPv4 protocol / IPv6 next header
  size_t l4 = 0;                // the upper-layer header (nonzero once the IP header is complete)
  bool udp_ports = false;       // UDP and its two port fields are in the frame
  uint16_t udp_sport = 0, udp_dport = 0;
  size_t bth = 0;               // UDP destination port 4791: the BTH's offset (l4 + 8; the frame may end before)

  bool ok() const { return result.ok(); }
  bool roce_v1() const { return ethertype == kEtherTypeRoceV1; }
  bool roce_v2() const { return bth != 0; }  // by port alone: parse() says whether it is valid
  bool arp() const { return ethertype == kEtherTypeArp; }
};

Located locate(std::span<const uint8_t> frame);

}  // namespace uroce::proto
