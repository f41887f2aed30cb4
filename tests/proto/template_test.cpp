// build_from() (a prebuilt header template patched per packet, the engine's transmit path)
// writes byte for byte what build() writes: every valid opcode, IPv4 and IPv6, 0-2 VLAN tags,
// payload lengths 0..13 (every pad count) and larger, PSNs across the 24-bit wrap, every BTH
// flag and extension-header field varied, and a TOS / traffic class different from the one the
// template was made with (it comes from the packet's dscp/ecn). One template serves a whole
// sequence of packets, as a QP's does.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "proto/packet.hpp"
#include "proto/psn.hpp"

using namespace uroce::proto;

namespace {

Packet base_packet(int ip_version, int vlans) {
  Packet p;
  p.eth_dst = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  p.eth_src = {0x0a, 0x66, 0x77, 0x88, 0x99, 0xaa};
  p.vlan_count = uint8_t(vlans);
  p.vlan_tpid = {0x88A8, 0x8100};
  p.vlan_tci = {0xb123, 0x0456};
  p.ip_version = uint8_t(ip_version);
  for (int i = 0; i < 16; ++i) {
    p.ip_src[size_t(i)] = uint8_t(0xc0 + i);
    p.ip_dst[size_t(i)] = uint8_t(0x30 + 7 * i);
  }
  p.dscp = 26;
  p.ecn = 2;
  p.ttl = 61;
  p.ipv4_id = 0x2cfc;
  p.ipv4_flags_frag = 0x4000;
  p.flow_label = 0xabcde;
  p.udp_sport = 0xc2d9;
  p.pkey = 0xffff;
  p.dest_qp = 0x12345;
  return p;
}

// Compares build_from(t, p) with build(p), both into buffers prefilled with garbage.
void expect_same(const HeaderTemplate& t, const Packet& p, const char* what) {
  std::vector<uint8_t> slow(frame_len(p) + 80, 0xA5), fast(frame_len(p) + 80, 0x5A);
  const BuildResult a = build(p, slow);
  const BuildResult b = build_from(t, p, fast);
  ASSERT_EQ(a.error, b.error) << what;
  ASSERT_EQ(a.len, b.len) << what;
  ASSERT_EQ(frame_len(t, p), frame_len(p)) << what;
  if (!a.ok()) return;
  slow.resize(a.len);
  fast.resize(b.len);
  ASSERT_EQ(slow, fast) << what << ": opcode 0x" << std::hex << int(p.opcode) << " psn 0x" << p.psn << std::dec
                        << " payload " << p.payload.size() << " ip" << int(p.ip_version) << " vlans "
                        << int(p.vlan_count);
  Packet back;
  ASSERT_TRUE(parse(fast, back).ok()) << what;  // and the ICRC / IPv4 checksum verify
}

}  // namespace

TEST(Template, EveryOpcodeIpVersionVlanPadAndPsnWrap) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(5000);
  for (auto& x : data) x = uint8_t(rng());
  const size_t lens[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 63, 64, 65, 255, 256, 257, 258, 259, 1023, 4096};
  const uint32_t psns[] = {0, 1, 0x7FFFFF, 0xFFFFFE, 0xFFFFFF};
  size_t checked = 0;
  for (int ipv : {4, 6})
    for (int vlans : {0, 1, 2}) {
      const Packet base = base_packet(ipv, vlans);
      const HeaderTemplate t = make_template(base);
      ASSERT_TRUE(t.usable);
      Packet p = base;  // the engine's way: one packet, per-packet fields overwritten
      for (unsigned code = 0; code < 256; ++code) {
        if (!opcode_info(uint8_t(code)).valid) continue;
        p.opcode = uint8_t(code);
        for (uint32_t psn0 : psns)
          for (size_t len : lens) {
            const bool carries = opcode_info(uint8_t(code)).payload;
            if (!carries && len) continue;
            p.psn = psn_add(psn0, uint32_t(len));  // across the wrap too
            p.payload = std::span<const uint8_t>(data.data() + (len % 7), len);
            p.solicited = rng() & 1;
            p.ack_req = rng() & 1;
            p.migreq = rng() & 1;
            p.fecn = rng() & 1;
            p.becn = rng() & 1;
            p.dscp = uint8_t(rng() % 64);  // TOS from the packet, not the template
            p.ecn = uint8_t(rng() % 4);
            p.reth = {uint64_t(rng()) << 32 | rng(), uint32_t(rng()), uint32_t(rng())};
            p.aeth = {uint8_t(rng()), uint32_t(rng() & 0xFFFFFF)};
            p.atomic = {uint64_t(rng()) << 32 | rng(), uint32_t(rng()), uint64_t(rng()) << 32 | rng(), uint64_t(rng())};
            p.atomic_ack_orig = uint64_t(rng()) << 32 | rng();
            p.imm = uint32_t(rng());
            p.ieth_rkey = uint32_t(rng());
            p.deth = {uint32_t(rng()), 0, uint32_t(rng() & 0xFFFFFF)};
            for (auto& c : p.cnp_reserved) c = uint8_t(rng());
            expect_same(t, p, "sequence");
            if (::testing::Test::HasFatalFailure()) return;
            ++checked;
          }
      }
    }
  EXPECT_GT(checked, 10000u);
}

TEST(Template, FallsBackWhereATemplateCannotExpressThePacket) {
  std::vector<uint8_t> payload(37, 0x42);
  const uint8_t opts[8] = {1, 1, 1, 1, 0x94, 4, 0, 0};
  const uint8_t trailer[6] = {0, 0, 0, 0, 0, 0};
  for (int ipv : {4, 6}) {
    Packet p = base_packet(ipv, 0);
    p.opcode = op::kSendOnly;
    p.payload = payload;
    {
      Packet q = p;
      q.udp_checksum = true;
      EXPECT_FALSE(make_template(q).usable);
      expect_same(make_template(p), q, "udp checksum");  // a usable template, a packet it cannot do
    }
    {
      Packet q = p;
      q.l2_trailer = trailer;
      expect_same(make_template(p), q, "l2 trailer");
    }
    if (ipv == 4) {
      Packet q = p;
      q.ipv4_options = opts;
      EXPECT_FALSE(make_template(q).usable);
      expect_same(make_template(q), q, "ipv4 options");
    }
  }
}

TEST(Template, ReportsTheErrorsBuildReports) {
  Packet p = base_packet(4, 0);
  const HeaderTemplate t = make_template(p);
  std::vector<uint8_t> small(40), big(70000);
  p.opcode = 0x15;  // not in the table
  EXPECT_EQ(build_from(t, p, big).error, BuildError::InvalidOpcode);
  p.opcode = op::kAck;
  uint8_t one = 1;
  p.payload = {&one, 1};
  EXPECT_EQ(build_from(t, p, big).error, BuildError::PayloadNotAllowed);
  p.payload = {};
  EXPECT_EQ(build_from(t, p, small).error, BuildError::BufferTooSmall);
  EXPECT_EQ(build_from(t, p, small).len, frame_len(p));
  p.opcode = op::kSendOnly;
  std::vector<uint8_t> huge(66000);
  p.payload = huge;
  std::vector<uint8_t> out(frame_len(p));
  EXPECT_EQ(build_from(t, p, out).error, BuildError::TooLong);
  EXPECT_EQ(build(p, out).error, BuildError::TooLong);
  // A frame shorter than the template's fixed-size copy (an ACK: 62 bytes) in a buffer just
  // large enough: nothing is written past it.
  p.payload = {};
  p.opcode = op::kAck;
  std::vector<uint8_t> exact(frame_len(p) + 16, 0xCC);
  const BuildResult r = build_from(t, p, std::span<uint8_t>(exact.data(), frame_len(p)));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.len, frame_len(p));
  for (size_t i = frame_len(p); i < exact.size(); ++i) EXPECT_EQ(exact[i], 0xCC) << i;
}
