// Byte-exact tests of the control-plane wire views (arp.hpp, icmp.hpp) and of the checksum
// routine on them: the frames of control_frames.hpp (ARP request and reply, ICMP echo, ICMPv6
// neighbour solicitation and advertisement, ICMPv6 echo) read field by field through the
// views, and written again from the fields into a zeroed buffer.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "proto/arp.hpp"
#include "proto/checksum.hpp"
#include "proto/headers.hpp"
#include "proto/icmp.hpp"
#include "proto/locate.hpp"
#include "tests/proto/control_frames.hpp"

using namespace uroce::proto;
using namespace uroce::proto::test;

namespace {

// Ethernet and IPv6 headers of an ND message (32 bytes of ICMPv6, hop limit 255) into `buf`.
void put_nd_headers(std::vector<uint8_t>& buf, const uint8_t* dmac, const uint8_t* smac, const uint8_t* src,
                    const uint8_t* dst) {
  EthView<uint8_t> e(buf.data());
  e.set_dst(dmac);
  e.set_src(smac);
  e.set_ethertype(kEtherTypeIpv6);
  Ipv6View<uint8_t> w6(buf.data() + 14);
  w6.set_vtf(0, 0);
  w6.set_payload_len(32);
  w6.set_next_header(kIpProtoIcmp6);
  w6.set_hop_limit(kNdHopLimit);
  w6.set_src(src);
  w6.set_dst(dst);
}

// The headers of `frame` up to `l4`, then an echo message written through IcmpView (checksum
// zero) with the data "uroce!".
std::vector<uint8_t> echo_from_headers(const std::vector<uint8_t>& frame, size_t l4, uint8_t type, uint16_t id,
                                       uint16_t seq) {
  std::vector<uint8_t> buf(frame.begin(), frame.begin() + long(l4));
  buf.resize(l4 + IcmpView<uint8_t>::kSize + 6);
  IcmpView<uint8_t> w(buf.data() + l4);
  w.set_type(type);
  w.set_code(0);
  w.set_checksum(0);
  w.set_identifier(id);
  w.set_sequence(seq);
  std::memcpy(buf.data() + l4 + IcmpView<uint8_t>::kSize, "uroce!", 6);
  return buf;
}

std::span<const uint8_t> tail(const std::vector<uint8_t>& f, size_t from) { return {f.data() + from, f.size() - from}; }

}  // namespace

TEST(ArpView, RequestBothWays) {
  static_assert(ArpView<const uint8_t>::kSize == 28 && ArpView<uint8_t>::kSize == 28);
  ASSERT_EQ(kArpRequestFrame.size(), 42u);
  ArpView<const uint8_t> a(kArpRequestFrame.data() + 14);
  EXPECT_EQ(a.hw_type(), kArpHwEthernet);
  EXPECT_EQ(a.proto_type(), kEtherTypeIpv4);
  EXPECT_EQ(a.hw_len(), 6);
  EXPECT_EQ(a.proto_len(), 4);
  EXPECT_TRUE(a.is_ethernet_ipv4());
  EXPECT_EQ(a.oper(), kArpRequest);
  EXPECT_EQ(0, std::memcmp(a.sha(), kMacA, 6));
  EXPECT_EQ(0, std::memcmp(a.spa(), kIp4A, 4));
  EXPECT_EQ(0, std::memcmp(a.tpa(), kIp4B, 4));
  const uint8_t zero[6] = {};
  EXPECT_EQ(0, std::memcmp(a.tha(), zero, 6));

  std::vector<uint8_t> buf(42);
  EthView<uint8_t> e(buf.data());
  const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  e.set_dst(bcast);
  e.set_src(kMacA);
  e.set_ethertype(kEtherTypeArp);
  ArpView<uint8_t> w(buf.data() + 14);
  w.set_ethernet_ipv4();
  w.set_oper(kArpRequest);
  w.set_sha(kMacA);
  w.set_spa(kIp4A);
  w.set_tha(zero);
  w.set_tpa(kIp4B);
  EXPECT_EQ(buf, kArpRequestFrame);
}

TEST(ArpView, ReplyBothWays) {
  ArpView<const uint8_t> a(kArpReplyFrame.data() + 14);
  EXPECT_EQ(a.oper(), kArpReply);
  EXPECT_EQ(0, std::memcmp(a.sha(), kMacB, 6));
  EXPECT_EQ(0, std::memcmp(a.spa(), kIp4B, 4));
  EXPECT_EQ(0, std::memcmp(a.tha(), kMacA, 6));
  EXPECT_EQ(0, std::memcmp(a.tpa(), kIp4A, 4));

  std::vector<uint8_t> buf(42);
  EthView<uint8_t> e(buf.data());
  e.set_dst(kMacA);
  e.set_src(kMacB);
  e.set_ethertype(kEtherTypeArp);
  ArpView<uint8_t> w(buf.data() + 14);
  w.set_ethernet_ipv4();
  w.set_oper(kArpReply);
  w.set_sha(kMacB);
  w.set_spa(kIp4B);
  w.set_tha(kMacA);
  w.set_tpa(kIp4A);
  EXPECT_EQ(buf, kArpReplyFrame);

  // Anything but Ethernet / IPv4 is not ours.
  std::vector<uint8_t> other = kArpReplyFrame;
  other[19] = 16;  // protocol address length
  EXPECT_FALSE(ArpView<const uint8_t>(other.data() + 14).is_ethernet_ipv4());
}

TEST(IcmpView, EchoRequestBothWays) {
  static_assert(IcmpView<const uint8_t>::kSize == 8);
  ASSERT_EQ(kEcho4Frame.size(), 48u);
  const Located at = locate(kEcho4Frame);
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(at.ip_proto, kIpProtoIcmp);
  EXPECT_EQ(at.l4, 34u);
  IcmpView<const uint8_t> ic(kEcho4Frame.data() + at.l4);
  EXPECT_EQ(ic.type(), kIcmpEchoRequest);
  EXPECT_EQ(ic.code(), 0);
  EXPECT_EQ(ic.checksum(), 0x9bd3);
  EXPECT_EQ(ic.identifier(), 0x1234);
  EXPECT_EQ(ic.sequence(), 1);
  EXPECT_EQ(inet_checksum(kEcho4Frame.data() + 14, 20), 0);   // the IPv4 header verifies
  EXPECT_EQ(inet_checksum(kEcho4Frame.data() + 34, 14), 0);   // and so does the ICMP message

  // Write the ICMP part again: header fields, data, then the checksum over the zeroed field.
  std::vector<uint8_t> buf = echo_from_headers(kEcho4Frame, 34, kIcmpEchoRequest, 0x1234, 1);
  IcmpView<uint8_t>(buf.data() + 34).set_checksum(inet_checksum(buf.data() + 34, 14));
  EXPECT_EQ(buf, kEcho4Frame);
}

TEST(NdView, SolicitationBothWays) {
  static_assert(NdView<const uint8_t>::kSize == 24 && NdOptionView<const uint8_t>::kSize == 8);
  ASSERT_EQ(kNsFrame.size(), 86u);
  const Located at = locate(kNsFrame);
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(at.ip_version, 6);
  EXPECT_EQ(at.ip_proto, kIpProtoIcmp6);
  ASSERT_EQ(at.l4, 54u);
  Ipv6View<const uint8_t> ip(kNsFrame.data() + 14);
  EXPECT_EQ(ip.hop_limit(), kNdHopLimit);
  EXPECT_EQ(ip.payload_len(), 32);
  NdView<const uint8_t> nd(kNsFrame.data() + 54);
  EXPECT_EQ(nd.type(), kIcmp6NeighbourSolicit);
  EXPECT_EQ(nd.code(), 0);
  EXPECT_EQ(nd.checksum(), 0xdf3f);
  EXPECT_EQ(nd.flags(), 0u);
  EXPECT_EQ(0, std::memcmp(nd.target(), kLlB, 16));
  const uint8_t* sll = find_nd_option(tail(kNsFrame, 78), kNdOptSourceLinkAddr);
  ASSERT_EQ(sll, kNsFrame.data() + 78);
  EXPECT_EQ(NdOptionView<const uint8_t>(sll).units(), 1);
  EXPECT_EQ(0, std::memcmp(NdOptionView<const uint8_t>(sll).lladdr(), kMacA, 6));
  EXPECT_EQ(find_nd_option(tail(kNsFrame, 78), kNdOptTargetLinkAddr), nullptr);
  EXPECT_TRUE(l4_checksum_ok(kLlA, kSnB, kIpProtoIcmp6, kNsFrame.data() + 54, 32));

  // The whole frame from its parts: multicast addresses derived from the target.
  std::vector<uint8_t> buf(86);
  uint8_t sn[16], mac[6];
  solicited_node(kLlB, sn);
  EXPECT_EQ(0, std::memcmp(sn, kSnB, 16));
  ipv6_multicast_mac(sn, mac);
  EXPECT_TRUE(is_ipv6_multicast_mac(mac));
  put_nd_headers(buf, mac, kMacA, kLlA, sn);
  NdView<uint8_t> w(buf.data() + 54);
  w.set_type(kIcmp6NeighbourSolicit);
  w.set_target(kLlB);
  NdOptionView<uint8_t>(buf.data() + 78).set_lladdr_option(kNdOptSourceLinkAddr, kMacA);
  w.set_checksum(l4_checksum(kLlA, sn, kIpProtoIcmp6, buf.data() + 54, 32));
  EXPECT_EQ(buf, kNsFrame);
}

TEST(NdView, AdvertisementBothWays) {
  ASSERT_EQ(kNaFrame.size(), 86u);
  NdView<const uint8_t> nd(kNaFrame.data() + 54);
  EXPECT_EQ(nd.type(), kIcmp6NeighbourAdvert);
  EXPECT_EQ(nd.checksum(), 0x7cc2);
  EXPECT_EQ(nd.flags(), kNaSolicited | kNaOverride);
  EXPECT_FALSE(nd.router());
  EXPECT_TRUE(nd.solicited());
  EXPECT_TRUE(nd.override_flag());
  EXPECT_EQ(0, std::memcmp(nd.target(), kLlB, 16));
  const uint8_t* tll = find_nd_option(tail(kNaFrame, 78), kNdOptTargetLinkAddr);
  ASSERT_NE(tll, nullptr);
  EXPECT_EQ(0, std::memcmp(NdOptionView<const uint8_t>(tll).lladdr(), kMacB, 6));
  EXPECT_TRUE(l4_checksum_ok(kLlB, kLlA, kIpProtoIcmp6, kNaFrame.data() + 54, 32));

  std::vector<uint8_t> buf(86);
  put_nd_headers(buf, kMacA, kMacB, kLlB, kLlA);
  NdView<uint8_t> w(buf.data() + 54);
  w.set_type(kIcmp6NeighbourAdvert);
  w.set_code(0);
  w.set_flags(kNaSolicited | kNaOverride);
  w.set_target(kLlB);
  NdOptionView<uint8_t>(buf.data() + 78).set_lladdr_option(kNdOptTargetLinkAddr, kMacB);
  w.set_checksum(l4_checksum(kLlB, kLlA, kIpProtoIcmp6, buf.data() + 54, 32));
  EXPECT_EQ(buf, kNaFrame);
}

TEST(NdView, OptionWalkStaysInside) {
  // Two options: an unknown one of 16 bytes, then a source link-layer address.
  std::vector<uint8_t> o = {9, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 1, 1, 2, 0, 0, 0, 0, 7};
  const uint8_t* sll = find_nd_option(o, kNdOptSourceLinkAddr);
  ASSERT_EQ(sll, o.data() + 16);
  EXPECT_EQ(NdOptionView<const uint8_t>(sll).lladdr()[5], 7);
  // Cut inside the second option, a length running past the end, a zero length, nothing at all.
  EXPECT_EQ(find_nd_option(std::span<const uint8_t>(o.data(), 23), kNdOptSourceLinkAddr), nullptr);
  std::vector<uint8_t> past = o;
  past[1] = 4;  // 32 bytes claimed, 24 there
  EXPECT_EQ(find_nd_option(past, kNdOptSourceLinkAddr), nullptr);
  std::vector<uint8_t> zero = o;
  zero[1] = 0;
  EXPECT_EQ(find_nd_option(zero, kNdOptSourceLinkAddr), nullptr);
  EXPECT_EQ(find_nd_option({}, kNdOptSourceLinkAddr), nullptr);
}

TEST(IcmpView, Icmp6EchoRequestBothWays) {
  ASSERT_EQ(kEcho6Frame.size(), 68u);
  IcmpView<const uint8_t> ic(kEcho6Frame.data() + 54);
  EXPECT_EQ(ic.type(), kIcmp6EchoRequest);
  EXPECT_EQ(ic.code(), 0);
  EXPECT_EQ(ic.checksum(), 0x27e7);
  EXPECT_EQ(ic.identifier(), 0x4321);
  EXPECT_EQ(ic.sequence(), 7);
  EXPECT_TRUE(l4_checksum_ok(kLlA, kLlB, kIpProtoIcmp6, kEcho6Frame.data() + 54, 14));

  std::vector<uint8_t> buf = echo_from_headers(kEcho6Frame, 54, kIcmp6EchoRequest, 0x4321, 7);
  IcmpView<uint8_t>(buf.data() + 54).set_checksum(l4_checksum(kLlA, kLlB, kIpProtoIcmp6, buf.data() + 54, 14));
  EXPECT_EQ(buf, kEcho6Frame);
}
