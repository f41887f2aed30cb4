#include "proto/locate.hpp"

namespace uroce::proto {

Located locate(std::span<const uint8_t> frame) {
  Located r;
  const uint8_t* const b = frame.data();
  const size_t n = frame.size();
  auto stop = [&r](ParseError e, Layer l = Layer::Ethernet) -> Located& {
    r.result = {e, l};
    return r;
  };
  if (n < EthView<const uint8_t>::kSize) return stop(ParseError::Truncated, Layer::Ethernet);
  uint16_t type = EthView<const uint8_t>(b).ethertype();
  size_t off = EthView<const uint8_t>::kSize;
  while ((type == kEtherTypeVlan || type == kEtherTypeQinQ) && r.vlan_count < 2) {
    if (n - off < VlanView<const uint8_t>::kSize) return stop(ParseError::Truncated, Layer::Vlan);
    VlanView<const uint8_t> tag(b + off);
    if (r.vlan_count == 0) r.outer_tci = tag.tci();
    ++r.vlan_count;
    type = tag.inner_type();
    off += VlanView<const uint8_t>::kSize;
  }
  r.ethertype = type;
  r.l3 = off;

  if (type == kEtherTypeIpv4) {
    if (n - off < Ipv4View<const uint8_t>::kSize) return stop(ParseError::Truncated, Layer::Ipv4);
    Ipv4View<const uint8_t> ip(b + off);
    if (ip.version() != 4) return stop(ParseError::BadIpVersion);
    if (ip.ihl() < 5) return stop(ParseError::BadIpv4Header);
    if (n - off < ip.header_len()) return stop(ParseError::Truncated, Layer::Ipv4);
    r.ip_header_len = ip.header_len();
    r.ip_proto = ip.protocol();
    r.ip_version = 4;
  } else if (type == kEtherTypeIpv6) {
    if (n - off < Ipv6View<const uint8_t>::kSize) return stop(ParseError::Truncated, Layer::Ipv6);
    Ipv6View<const uint8_t> ip(b + off);
    if (ip.version() != 6) return stop(ParseError::BadIpVersion);
    r.ip_header_len = Ipv6View<const uint8_t>::kSize;
    r.ip_proto = ip.next_header();
    r.ip_version = 6;
  } else {
    return r;  // ARP, RoCE v1 or another ethertype: l3 is where its packet starts
  }
  off += r.ip_header_len;
  r.l4 = off;
  if (r.ip_proto != kIpProtoUdp) return r;
  // The ports are enough to call a frame RoCEv2 (a snapped capture may end inside UDP).
  if (n - off < 4) return stop(ParseError::Truncated, Layer::Udp);
  UdpView<const uint8_t> udp(b + off);
  r.udp_ports = true;
  r.udp_sport = udp.src_port();
  r.udp_dport = udp.dst_port();
  if (r.udp_dport == kRoceV2Port) r.bth = off + UdpView<const uint8_t>::kSize;
  if (n - off < UdpView<const uint8_t>::kSize) return stop(ParseError::Truncated, Layer::Udp);
  return r;
}

}  // namespace uroce::proto
