// proto/ecn.hpp: marking a frame CE changes the ECN bits and, for IPv4, the header checksum, and
// nothing else: byte for byte against the frame before, with the ICRC still valid (parse()).
#include <gtest/gtest.h>

#include "proto/checksum.hpp"
#include "proto/ecn.hpp"
#include "tests/proto/test_util.hpp"

namespace uroce::proto {
namespace {

using namespace test;

std::vector<uint8_t> frame(int ip_version, int vlans, uint8_t ecn) {
  const std::vector<uint8_t> payload = seq_payload(64);
  Packet p = make_packet(op::kWriteOnly, ip_version, vlans, payload);
  p.ecn = ecn;
  p.dscp = 26;
  return build_frame(p);
}

TEST(MarkCe, Ipv4EctBecomesCeWithANewHeaderChecksumAndNothingElse) {
  for (uint8_t ect : {uint8_t(1), uint8_t(2)})
    for (int vlans : {0, 1, 2}) {
      std::vector<uint8_t> f = frame(4, vlans, ect);
      const std::vector<uint8_t> before = f;
      const size_t l3 = l3_offset(f);
      EXPECT_EQ(ecn_of(f), ect);
      ASSERT_EQ(mark_ce(f), CeMark::Marked);
      EXPECT_EQ(ecn_of(f), 3);
      EXPECT_EQ(f[l3 + 1], uint8_t(26 << 2 | 3));
      EXPECT_EQ(inet_checksum(&f[l3], 20), 0) << "the header checksums to zero";
      for (size_t i = 0; i < f.size(); ++i)
        if (i != l3 + 1 && i != l3 + 10 && i != l3 + 11) {
          EXPECT_EQ(f[i], before[i]) << "byte " << i;
        }
      Packet p;
      ASSERT_TRUE(parse(f, p).ok()) << "the ICRC masks the ECN bits: still valid";
      EXPECT_EQ(p.ecn, 3);
      EXPECT_EQ(p.dscp, 26);
      EXPECT_EQ(mark_ce(f), CeMark::AlreadyCe);
    }
}

TEST(MarkCe, Ipv6EctBecomesCeInTheTrafficClass) {
  std::vector<uint8_t> f = frame(6, 0, 2);
  const std::vector<uint8_t> before = f;
  const size_t l3 = l3_offset(f);
  ASSERT_EQ(mark_ce(f), CeMark::Marked);
  EXPECT_EQ(f[l3 + 1], uint8_t(before[l3 + 1] | 0x30));
  for (size_t i = 0; i < f.size(); ++i)
    if (i != l3 + 1) {
      EXPECT_EQ(f[i], before[i]) << "byte " << i;
    }
  Packet p;
  ASSERT_TRUE(parse(f, p).ok());
  EXPECT_EQ(p.ecn, 3);
  EXPECT_EQ(p.dscp, 26);
}

TEST(MarkCe, NotEctAndNotIpAreLeftAlone) {
  std::vector<uint8_t> f = frame(4, 0, 0);
  const std::vector<uint8_t> before = f;
  EXPECT_EQ(mark_ce(f), CeMark::NotEct);
  EXPECT_EQ(f, before);
  for (size_t n = 0; n < 34; ++n) {  // cut inside the Ethernet or IPv4 header
    std::vector<uint8_t> cut(before.begin(), before.begin() + long(n));
    EXPECT_EQ(mark_ce(cut), CeMark::NotIp) << n;
    EXPECT_EQ(ecn_of(cut), -1) << n;
  }
  EXPECT_EQ(ce_mark_name(CeMark::NotEct), "not ECN-capable");
}

}  // namespace
}  // namespace uroce::proto
