// The port's control plane (port/neigh.hpp) on frame bytes, without DPDK: host B answers the
// literal requests of tests/proto/control_frames.hpp with exactly the literal answers, also
// behind a VLAN tag (the answer keeps the tag), hands RoCEv2 for it on, learns neighbours,
// counts and drops the rest, and builds the ARP request and neighbour solicitation host A sends.
#include <gtest/gtest.h>

#include <vector>

#include "port/link_counters.hpp"
#include "port/neigh.hpp"
#include "tests/proto/control_frames.hpp"
#include "tests/proto/test_util.hpp"

using namespace uroce;
using namespace uroce::proto::test;
using port::ControlPlane;
using port::Verdict;

namespace {

proto::Ip6 ip6(const uint8_t* a) {
  proto::Ip6 g;
  std::memcpy(g.data(), a, 16);
  return g;
}

struct Host {
  port::LinkCounters ctr;
  ControlPlane cp;
  Host(const uint8_t* mac, const uint8_t* ip4, const uint8_t* ll) {
    proto::Mac m;
    std::memcpy(m.data(), mac, 6);
    cp.init(m, ip4, {ip6(ll)}, &ctr);
  }
  // Sorts a copy of `in` in a 256-byte buffer; the answer (if any) comes back in `out`.
  Verdict sort(const std::vector<uint8_t>& in, std::vector<uint8_t>& out) {
    out = in;
    out.resize(256);
    const Verdict v = cp.sort(out.data(), uint32_t(in.size()), uint32_t(out.size()));
    out.resize(v.kind == Verdict::Reply ? v.len : in.size());
    return v;
  }
};

Host host_a() { return Host(kMacA, kIp4A, kLlA); }
Host host_b() { return Host(kMacB, kIp4B, kLlB); }

std::vector<uint8_t> with_vlan(const std::vector<uint8_t>& f, uint16_t tci) {
  std::vector<uint8_t> out(f.size() + 4);
  for (size_t i = 0; i < out.size(); ++i) out[i] = i < 12 ? f[i] : i >= 16 ? f[i - 4] : 0;
  out[12] = 0x81, out[13] = 0x00, out[14] = uint8_t(tci >> 8), out[15] = uint8_t(tci);
  return out;
}

}  // namespace

TEST(ControlPlane, AnswersArpAndLearnsTheAsker) {
  Host b = host_b();
  std::vector<uint8_t> out;
  const Verdict v = b.sort(kArpRequestFrame, out);
  ASSERT_EQ(v.kind, Verdict::Reply);
  EXPECT_EQ(out, kArpReplyFrame);
  EXPECT_EQ(v.sent, &b.ctr.arp_replies_sent);
  EXPECT_EQ(b.ctr.arp_requests, 1u);
  proto::Mac m;
  ASSERT_TRUE(b.cp.lookup(port::v4mapped(kIp4A), m));
  EXPECT_EQ(0, std::memcmp(m.data(), kMacA, 6));
  // A learns B from the reply to its own request.
  Host a = host_a();
  uint8_t req[128];
  a.cp.arp_request(req, kIp4B);
  EXPECT_EQ(a.sort(kArpReplyFrame, out).kind, Verdict::Drop);
  EXPECT_EQ(a.ctr.arp_replies_rcvd, 1u);
  ASSERT_TRUE(a.cp.lookup(port::v4mapped(kIp4B), m));
  EXPECT_EQ(0, std::memcmp(m.data(), kMacB, 6));
  // A does not answer for B's address.
  EXPECT_EQ(a.sort(kArpRequestFrame, out).kind, Verdict::Drop);
  EXPECT_EQ(a.ctr.drop_not_our_ip, 1u);
}

TEST(ControlPlane, AnswersPingAndNeighbourSolicitation) {
  Host b = host_b();
  std::vector<uint8_t> out;
  Verdict v = b.sort(kEcho4Frame, out);
  ASSERT_EQ(v.kind, Verdict::Reply);
  EXPECT_EQ(out, kEcho4ReplyFrame);
  EXPECT_EQ(v.sent, &b.ctr.icmp_replies_sent);
  v = b.sort(kEcho6Frame, out);
  ASSERT_EQ(v.kind, Verdict::Reply);
  EXPECT_EQ(out, kEcho6ReplyFrame);
  v = b.sort(kNsFrame, out);
  ASSERT_EQ(v.kind, Verdict::Reply);
  EXPECT_EQ(out, kNaFrame);
  EXPECT_EQ(v.sent, &b.ctr.nd_adverts_sent);
  EXPECT_EQ(b.ctr.icmp_echo, 2u);
  EXPECT_EQ(b.ctr.nd_solicits, 1u);
  proto::Mac m;
  EXPECT_TRUE(b.cp.lookup(ip6(kLlA), m));
  // A learns B from the advertisement answering its solicitation.
  Host a = host_a();
  uint8_t req[128];
  a.cp.neighbour_solicit(req, ip6(kLlB));
  EXPECT_EQ(a.sort(kNaFrame, out).kind, Verdict::Drop);
  EXPECT_EQ(a.ctr.nd_adverts_rcvd, 1u);
  ASSERT_TRUE(a.cp.lookup(ip6(kLlB), m));
  EXPECT_EQ(0, std::memcmp(m.data(), kMacB, 6));
}

TEST(ControlPlane, VlanTaggedRequestsAreAnsweredWithTheTag) {
  Host b = host_b();
  std::vector<uint8_t> out;
  const std::pair<const std::vector<uint8_t>*, const std::vector<uint8_t>*> cases[] = {
      {&kArpRequestFrame, &kArpReplyFrame}, {&kEcho4Frame, &kEcho4ReplyFrame},
      {&kNsFrame, &kNaFrame}, {&kEcho6Frame, &kEcho6ReplyFrame}};
  for (const auto& [req, ans] : cases) {
    const Verdict v = b.sort(with_vlan(*req, 0x2064), out);
    ASSERT_EQ(v.kind, Verdict::Reply);
    EXPECT_EQ(out, with_vlan(*ans, 0x2064));
  }
  EXPECT_EQ(b.ctr.dropped(), 0u);
}

TEST(ControlPlane, HandsRoceV2OnAndDropsTheRest) {
  // The golden WRITE Only goes to 02:00:c6:12:01:02, 198.18.1.2.
  const uint8_t mac[6] = {0x02, 0x00, 0xc6, 0x12, 0x01, 0x02};
  const uint8_t ip4[4] = {198, 18, 1, 2};
  Host h(mac, ip4, kLlB);
  std::vector<uint8_t> out;
  EXPECT_EQ(h.sort(kWriteSmallFrame, out).kind, Verdict::Deliver);
  EXPECT_EQ(h.sort(with_vlan(kWriteSmallFrame, 5), out).kind, Verdict::Deliver);
  EXPECT_EQ(h.ctr.rx_roce, 2u);
  std::vector<uint8_t> f = kWriteSmallFrame;
  f[37] ^= 1;  // another UDP port
  EXPECT_EQ(h.sort(f, out).kind, Verdict::Drop);
  EXPECT_EQ(h.ctr.drop_udp_port, 1u);
  f = kWriteSmallFrame;
  f[33] ^= 1;  // another destination IP
  EXPECT_EQ(h.sort(f, out).kind, Verdict::Drop);
  EXPECT_EQ(h.ctr.drop_not_our_ip, 1u);
  f = kWriteSmallFrame;
  f[5] ^= 1;  // another destination MAC
  EXPECT_EQ(h.sort(f, out).kind, Verdict::Drop);
  EXPECT_EQ(h.ctr.drop_not_our_mac, 1u);
  f = kWriteSmallFrame;
  f[12] = 0x88, f[13] = 0xcc;  // LLDP
  EXPECT_EQ(h.sort(f, out).kind, Verdict::Drop);
  EXPECT_EQ(h.ctr.drop_ethertype, 1u);
  // Every cut of the frame is dropped, never delivered with fewer than the UDP header's bytes.
  for (size_t n = 0; n < 42; ++n) {
    const std::vector<uint8_t> cut(kWriteSmallFrame.begin(), kWriteSmallFrame.begin() + long(n));
    EXPECT_EQ(h.sort(cut, out).kind, Verdict::Drop) << n;
  }
}

TEST(ControlPlane, BuildsArpRequestAndNeighbourSolicitation) {
  Host a = host_a();
  std::vector<uint8_t> buf(128);
  buf.resize(a.cp.arp_request(buf.data(), kIp4B));
  EXPECT_EQ(buf, kArpRequestFrame);
  buf.assign(128, 0xEE);
  buf.resize(a.cp.neighbour_solicit(buf.data(), ip6(kLlB)));
  EXPECT_EQ(buf, kNsFrame);
}

// ARP/ND poisoning (docs/security.md): the kernel's defaults.
TEST(ControlPlane, UnsolicitedRepliesCreateNothingAndOnlyRefresh) {
  Host a = host_a();
  std::vector<uint8_t> out;
  proto::Mac m;
  // A gratuitous reply and an unsolicited advertisement: no entry.
  EXPECT_EQ(a.sort(kArpReplyFrame, out).kind, Verdict::Drop);
  EXPECT_EQ(a.sort(kNaFrame, out).kind, Verdict::Drop);
  EXPECT_FALSE(a.cp.lookup(port::v4mapped(kIp4B), m));
  EXPECT_FALSE(a.cp.lookup(ip6(kLlB), m));
  EXPECT_EQ(a.ctr.neigh_unsolicited, 2u);
  // Asked for, then answered: an entry; the same answer again only refreshes it.
  uint8_t req[128];
  a.cp.arp_request(req, kIp4B);
  a.sort(kArpReplyFrame, out);
  ASSERT_TRUE(a.cp.lookup(port::v4mapped(kIp4B), m));
  a.sort(kArpReplyFrame, out);
  EXPECT_EQ(a.ctr.neigh_mac_changed, 0u);
  // A reply for B from another MAC: the entry follows it, counted (and logged).
  std::vector<uint8_t> liar = kArpReplyFrame;
  liar[6 + 5] ^= 0x01;        // Ethernet source
  liar[14 + 8 + 5] ^= 0x01;   // ARP sender hardware address
  a.sort(liar, out);
  EXPECT_EQ(a.ctr.neigh_mac_changed, 1u);
}

// `a` asks for B's MAC (an ARP request) at `at_ms`.
void ask_b(Host& a, uint64_t at_ms) {
  uint8_t req[128];
  a.cp.set_time_ms(at_ms);
  a.cp.arp_request(req, kIp4B);
}

TEST(ControlPlane, AnAnswerLongAfterTheRequestCreatesNothing) {
  Host a = host_a();
  ask_b(a, 1000);
  std::vector<uint8_t> out;
  a.cp.set_time_ms(1000 + param::kNeighbourPendingMs + 1);
  a.sort(kArpReplyFrame, out);
  proto::Mac m;
  EXPECT_FALSE(a.cp.lookup(port::v4mapped(kIp4B), m));
  EXPECT_EQ(a.ctr.neigh_unsolicited, 1u);
}

TEST(ControlPlane, EntriesAgeOut) {
  Host a = host_a();
  ask_b(a, 5000);
  std::vector<uint8_t> out;
  a.sort(kArpReplyFrame, out);
  proto::Mac m;
  a.cp.set_time_ms(5000 + param::kNeighbourTtlMs);
  EXPECT_TRUE(a.cp.lookup(port::v4mapped(kIp4B), m));
  a.cp.set_time_ms(5000 + param::kNeighbourTtlMs + 1);
  EXPECT_FALSE(a.cp.lookup(port::v4mapped(kIp4B), m)) << "an old entry is resolved again";
}

TEST(ControlPlane, NeighbourDiscoveryWithHopLimitBelow255IsDropped) {
  Host a = host_a(), b = host_b();
  std::vector<uint8_t> out;
  std::vector<uint8_t> ns = kNsFrame, na = kNaFrame;  // A's solicitation to B, B's advertisement to A
  ns[14 + 7] = na[14 + 7] = 254;  // IPv6 hop limit: the message crossed a router
  uint8_t req[128];
  a.cp.neighbour_solicit(req, ip6(kLlB));
  EXPECT_EQ(b.sort(ns, out).kind, Verdict::Drop);
  EXPECT_EQ(a.sort(na, out).kind, Verdict::Drop);
  EXPECT_EQ(b.ctr.drop_nd_hop_limit, 1u);
  EXPECT_EQ(a.ctr.drop_nd_hop_limit, 1u);
  EXPECT_EQ(b.ctr.nd_solicits, 0u);
  proto::Mac m;
  EXPECT_FALSE(a.cp.lookup(ip6(kLlB), m));
}
