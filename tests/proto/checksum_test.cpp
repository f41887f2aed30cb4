// The one checksum routine (proto/checksum.hpp): RFC 1071 examples, sums fed in pieces of any
// length, and the UDP pseudo header over IPv4 and IPv6 against literal values computed with an
// independent implementation. The ICMP and ICMPv6 cases are in control_test.cpp.
#include <gtest/gtest.h>

#include <vector>

#include "proto/checksum.hpp"
#include "proto/packet.hpp"
#include "tests/proto/test_util.hpp"

using namespace uroce::proto;

namespace {

// UDP 49152 -> 4791, length 13, checksum field zero, data "hello" (odd length).
const std::vector<uint8_t> kUdpHello = {0xc0, 0x00, 0x12, 0xb7, 0x00, 0x0d, 0x00, 0x00, 0x68, 0x65, 0x6c, 0x6c, 0x6f};
const uint8_t kIp4A[4] = {10, 0, 0, 1};
const uint8_t kIp4B[4] = {10, 0, 0, 2};
const uint8_t kLlA[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
const uint8_t kLlB[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xab, 0xcd, 0x02};

}  // namespace

TEST(Checksum, Rfc1071Sum) {
  // RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2 (folded).
  const uint8_t w[8] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(OnesSum().add(w, 8).folded(), 0xddf2);
  EXPECT_EQ(OnesSum().add(w, 8).checksum(), 0x220d);
  EXPECT_EQ(inet_checksum(w, 8), 0x220d);
  // Nothing summed: the complement of zero.
  EXPECT_EQ(OnesSum().checksum(), 0xFFFF);
  EXPECT_FALSE(OnesSum().verifies());
}

TEST(Checksum, PiecesOfAnyLengthGiveTheSameSum) {
  const std::vector<uint8_t>& f = test::kWriteSmallFrame;
  const uint16_t whole = OnesSum().add(f.data(), f.size()).folded();
  for (size_t a = 0; a <= f.size(); a += 7)
    for (size_t b = a; b <= f.size(); b += 5) {
      OnesSum s;
      s.add(f.data(), a).add(f.data() + a, b - a).add(std::span<const uint8_t>(f).subspan(b));
      ASSERT_EQ(s.folded(), whole) << "split at " << a << " and " << b;
    }
  // add16 / add32 are words at an even offset.
  const uint8_t be[6] = {0x12, 0x34, 0xde, 0xad, 0xbe, 0xef};
  EXPECT_EQ(OnesSum().add16(0x1234).add32(0xdeadbeef).folded(), OnesSum().add(be, 6).folded());
}

TEST(Checksum, UdpPseudoHeaderIpv4AndIpv6) {
  EXPECT_EQ(udp_checksum(kIp4A, kIp4B, kUdpHello.data(), kUdpHello.size()), 0xd547);
  EXPECT_EQ(udp_checksum(kLlA, kLlB, kUdpHello.data(), kUdpHello.size()), 0x1e9a);
  std::vector<uint8_t> u = kUdpHello;
  store_be16(u.data() + 6, 0xd547);
  EXPECT_TRUE(l4_checksum_ok(kIp4A, kIp4B, kIpProtoUdp, u.data(), u.size()));
  EXPECT_FALSE(l4_checksum_ok(kIp4B, kIp4B, kIpProtoUdp, u.data(), u.size()));
  store_be16(u.data() + 6, 0x1e9a);
  EXPECT_TRUE(l4_checksum_ok(kLlA, kLlB, kIpProtoUdp, u.data(), u.size()));
  // The pseudo header by hand: addresses, protocol, length, then the datagram.
  OnesSum s;
  s.add(kIp4A, 4).add(kIp4B, 4).add16(kIpProtoUdp).add16(uint16_t(kUdpHello.size())).add(kUdpHello);
  EXPECT_EQ(s.checksum(), 0xd547);
}

TEST(Checksum, UdpSendsZeroAsAllOnes) {
  // A datagram whose checksum computes to 0 is sent with 0xFFFF (RFC 768): find one by
  // adjusting two data bytes so that the sum is 0xFFFF.
  std::vector<uint8_t> u = kUdpHello;
  u.resize(16);  // three more data bytes; the last two, at an even offset, make the sum
  store_be16(u.data() + 4, uint16_t(u.size()));
  const uint16_t sum = pseudo_header(kIp4A, kIp4B, kIpProtoUdp, uint32_t(u.size())).add(u).folded();
  store_be16(u.data() + u.size() - 2, uint16_t(0xFFFF - sum));
  EXPECT_EQ(l4_checksum(kIp4A, kIp4B, kIpProtoUdp, u.data(), u.size()), 0);
  EXPECT_EQ(udp_checksum(kIp4A, kIp4B, u.data(), u.size()), 0xFFFF);
}
