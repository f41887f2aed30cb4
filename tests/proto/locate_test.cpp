// The header walker (proto/locate.hpp) on literal frames: the golden RDMA WRITE Only over
// IPv4, the same frame behind one and two VLAN tags, RoCEv2 over IPv6, RoCE v1, ARP, and every
// cut of a frame (it must stop with the layer it was in and never read past the end).
#include <gtest/gtest.h>

#include <vector>

#include "proto/locate.hpp"
#include "proto/packet.hpp"
#include "tests/proto/test_util.hpp"

using namespace uroce::proto;
using uroce::proto::test::kWriteSmallFrame;

namespace {

// `f` with `tags` (TPID and TCI each) inserted after the MAC addresses.
std::vector<uint8_t> tagged(const std::vector<uint8_t>& f, const std::vector<uint8_t>& tags) {
  std::vector<uint8_t> out(f.size() + tags.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = i < 12 ? f[i] : i < 12 + tags.size() ? tags[i - 12] : f[i - tags.size()];
  return out;
}

}  // namespace

TEST(Locate, RoceV2OverIpv4) {
  const Located l = locate(kWriteSmallFrame);
  ASSERT_TRUE(l.ok()) << l.result.message();
  EXPECT_EQ(l.vlan_count, 0);
  EXPECT_EQ(l.ethertype, kEtherTypeIpv4);
  EXPECT_EQ(l.l3, 14u);
  EXPECT_EQ(l.ip_version, 4);
  EXPECT_EQ(l.ip_header_len, 20u);
  EXPECT_EQ(l.ip_proto, kIpProtoUdp);
  EXPECT_EQ(l.l4, 34u);
  EXPECT_TRUE(l.udp_ports);
  EXPECT_EQ(l.udp_sport, 49881);
  EXPECT_EQ(l.udp_dport, kRoceV2Port);
  EXPECT_TRUE(l.roce_v2());
  EXPECT_FALSE(l.roce_v1());
  EXPECT_EQ(l.bth, 42u);
  EXPECT_EQ(kWriteSmallFrame[l.bth], 0x0a);  // RC RDMA WRITE Only
}

TEST(Locate, VlanTags) {
  const std::vector<uint8_t> one = tagged(kWriteSmallFrame, {0x81, 0x00, 0x61, 0x23});
  Located l = locate(one);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.vlan_count, 1);
  EXPECT_EQ(l.outer_tci, 0x6123);
  EXPECT_EQ(l.l3, 18u);
  EXPECT_EQ(l.l4, 38u);
  EXPECT_EQ(l.bth, 46u);
  Packet p;
  EXPECT_TRUE(parse(one, p).ok());  // parse() agrees

  const std::vector<uint8_t> two = tagged(kWriteSmallFrame, {0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x0b});
  l = locate(two);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.vlan_count, 2);
  EXPECT_EQ(l.outer_tci, 0x000a);
  EXPECT_EQ(l.l3, 22u);
  EXPECT_EQ(l.bth, 50u);
  EXPECT_TRUE(parse(two, p).ok());

  // A third tag is not followed, as parse() does not: its TPID is the ethertype.
  const std::vector<uint8_t> three =
      tagged(kWriteSmallFrame, {0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x0b, 0x81, 0x00, 0x00, 0x0c});
  l = locate(three);
  EXPECT_TRUE(l.ok());
  EXPECT_EQ(l.ethertype, kEtherTypeVlan);
  EXPECT_EQ(l.l4, 0u);
  EXPECT_FALSE(l.roce_v2());
}

TEST(Locate, RoceV2OverIpv6AndRoceV1) {
  const std::vector<uint8_t> payload = test::seq_payload(8);
  const std::vector<uint8_t> f = test::build_frame(test::make_packet(op::kSendOnly, 6, 0, payload));
  Located l = locate(f);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.ip_version, 6);
  EXPECT_EQ(l.ip_header_len, 40u);
  EXPECT_EQ(l.l4, 54u);
  EXPECT_EQ(l.udp_sport, 0xC0DE);
  EXPECT_EQ(l.bth, 62u);

  std::vector<uint8_t> v1(kWriteSmallFrame);
  v1[12] = 0x89, v1[13] = 0x15;
  l = locate(v1);
  EXPECT_TRUE(l.ok());
  EXPECT_TRUE(l.roce_v1());
  EXPECT_FALSE(l.roce_v2());
  EXPECT_EQ(l.l3, 14u);
  EXPECT_EQ(l.l4, 0u);
}

TEST(Locate, OtherUdpPortArpAndUnknownEthertype) {
  std::vector<uint8_t> f(kWriteSmallFrame);
  f[36] = 0x12, f[37] = 0xb8;  // destination port 4792
  Located l = locate(f);
  EXPECT_TRUE(l.ok());
  EXPECT_TRUE(l.udp_ports);
  EXPECT_EQ(l.udp_dport, 4792);
  EXPECT_FALSE(l.roce_v2());

  const std::vector<uint8_t> arp = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x01, 0x81, 0x00,
                                    0x00, 0x05, 0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01};
  l = locate(arp);
  EXPECT_TRUE(l.ok());
  EXPECT_TRUE(l.arp());
  EXPECT_EQ(l.vlan_count, 1);
  EXPECT_EQ(l.l3, 18u);  // the ARP packet; its length is the handler's to check

  std::vector<uint8_t> lldp(kWriteSmallFrame.begin(), kWriteSmallFrame.begin() + 20);
  lldp[12] = 0x88, lldp[13] = 0xcc;
  l = locate(lldp);
  EXPECT_TRUE(l.ok());
  EXPECT_EQ(l.ethertype, 0x88cc);
  EXPECT_EQ(l.ip_version, 0);
}

TEST(Locate, BadIpHeaders) {
  std::vector<uint8_t> f(kWriteSmallFrame);
  f[14] = 0x65;  // version 6 under ethertype IPv4
  Located l = locate(f);
  EXPECT_EQ(l.result.error, ParseError::BadIpVersion);
  EXPECT_EQ(l.l4, 0u);
  f[14] = 0x44;  // IHL 4
  l = locate(f);
  EXPECT_EQ(l.result.error, ParseError::BadIpv4Header);
  f[14] = 0x46;  // IHL 6: one word of options, UDP four bytes later
  l = locate(f);
  EXPECT_TRUE(l.ok());
  EXPECT_EQ(l.ip_header_len, 24u);
  EXPECT_EQ(l.l4, 38u);
  EXPECT_EQ(l.udp_sport, 0x0068);  // what stands there now (the UDP length field)
}

TEST(Locate, EveryCutStopsInTheRightLayer) {
  const std::vector<uint8_t> one = tagged(kWriteSmallFrame, {0x81, 0x00, 0x61, 0x23});
  for (size_t n = 0; n < one.size(); ++n) {
    // A copy of exactly n bytes, so that a read past the end is caught by the sanitizers.
    const std::vector<uint8_t> cut(one.begin(), one.begin() + long(n));
    const Located l = locate(cut);
    Layer want = Layer::Ethernet;
    if (n < 14) want = Layer::Ethernet;
    else if (n < 18) want = Layer::Vlan;
    else if (n < 38) want = Layer::Ipv4;
    else if (n < 46) want = Layer::Udp;
    if (n < 46) {
      ASSERT_EQ(l.result.error, ParseError::Truncated) << n;
      EXPECT_EQ(l.result.layer, want) << n;
    } else {
      EXPECT_TRUE(l.ok()) << n;
    }
    // The ports, and so the RoCEv2 verdict, are known once four UDP bytes are there.
    EXPECT_EQ(l.roce_v2(), n >= 42) << n;
  }
}
