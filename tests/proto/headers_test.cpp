// Byte-exact construction tests for every header view: a literal byte array and its fields,
// both ways (read the fields from the literal; write them into a zeroed buffer and compare).
// Values use distinct bytes so that a swapped or misplaced field fails.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "proto/checksum.hpp"
#include "proto/headers.hpp"
#include "proto/packet.hpp"
#include "tests/proto/test_util.hpp"

using namespace uroce::proto;
using uroce::proto::test::kWriteSmallFrame;

namespace {

template <size_t N>
using Bytes = std::array<uint8_t, N>;

template <template <typename> class V, size_t N>
void expect_size(const Bytes<N>&) {
  static_assert(V<const uint8_t>::kSize == N);
  static_assert(V<uint8_t>::kSize == N);
}

}  // namespace

TEST(HeaderViews, Ethernet) {
  const Bytes<14> lit = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55, 0x0a, 0x66, 0x77, 0x88, 0x99, 0xaa, 0x86, 0xdd};
  expect_size<EthView>(lit);
  EthView<const uint8_t> r(lit.data());
  EXPECT_EQ(0, std::memcmp(r.dst(), lit.data(), 6));
  EXPECT_EQ(0, std::memcmp(r.src(), lit.data() + 6, 6));
  EXPECT_EQ(r.dst(), lit.data());
  EXPECT_EQ(r.src(), lit.data() + 6);
  EXPECT_EQ(r.ethertype(), 0x86dd);

  Bytes<14> buf{};
  EthView<uint8_t> w(buf.data());
  const uint8_t dst[6] = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  const uint8_t src[6] = {0x0a, 0x66, 0x77, 0x88, 0x99, 0xaa};
  w.set_dst(dst);
  w.set_src(src);
  w.set_ethertype(0x86dd);
  EXPECT_EQ(buf, lit);
}

TEST(HeaderViews, Vlan) {
  // TCI 0xb123: PCP 5, DEI 1, VID 0x123; inner type IPv4.
  const Bytes<4> lit = {0xb1, 0x23, 0x08, 0x00};
  expect_size<VlanView>(lit);
  VlanView<const uint8_t> r(lit.data());
  EXPECT_EQ(r.tci(), 0xb123);
  EXPECT_EQ(r.pcp(), 5);
  EXPECT_EQ(r.vid(), 0x123);
  EXPECT_EQ(r.inner_type(), 0x0800);

  Bytes<4> buf{};
  VlanView<uint8_t> w(buf.data());
  w.set_tci(0xb123);
  w.set_inner_type(0x0800);
  EXPECT_EQ(buf, lit);
}

TEST(HeaderViews, Ipv4) {
  // 45 | TOS b9 (DSCP 46, ECN 1) | len 0x012c | id 0xabcd | flags/frag 0x6123 (DF, MF, offset
  // 0x123) | TTL 0x3f | proto 17 | checksum 0x5e7a | 10.1.2.3 -> 192.168.4.5
  const Bytes<20> lit = {0x45, 0xb9, 0x01, 0x2c, 0xab, 0xcd, 0x61, 0x23, 0x3f, 0x11,
                         0x5e, 0x7a, 0x0a, 0x01, 0x02, 0x03, 0xc0, 0xa8, 0x04, 0x05};
  expect_size<Ipv4View>(lit);
  Ipv4View<const uint8_t> r(lit.data());
  EXPECT_EQ(r.version(), 4);
  EXPECT_EQ(r.ihl(), 5);
  EXPECT_EQ(r.header_len(), 20u);
  EXPECT_EQ(r.tos(), 0xb9);
  EXPECT_EQ(r.dscp(), 46);
  EXPECT_EQ(r.ecn(), 1);
  EXPECT_EQ(r.total_len(), 0x012c);
  EXPECT_EQ(r.id(), 0xabcd);
  EXPECT_EQ(r.flags_frag(), 0x6123);
  EXPECT_TRUE(r.dont_fragment());
  EXPECT_TRUE(r.more_fragments());
  EXPECT_EQ(r.frag_offset(), 0x123);
  EXPECT_EQ(r.ttl(), 0x3f);
  EXPECT_EQ(r.protocol(), 17);
  EXPECT_EQ(r.checksum(), 0x5e7a);
  EXPECT_EQ(r.src(), lit.data() + 12);
  EXPECT_EQ(r.dst(), lit.data() + 16);

  Bytes<20> buf{};
  Ipv4View<uint8_t> w(buf.data());
  const uint8_t src[4] = {0x0a, 0x01, 0x02, 0x03};
  const uint8_t dst[4] = {0xc0, 0xa8, 0x04, 0x05};
  w.set_version_ihl(5);
  w.set_tos(46, 1);
  w.set_total_len(0x012c);
  w.set_id(0xabcd);
  w.set_flags_frag(0x6123);
  w.set_ttl(0x3f);
  w.set_protocol(17);
  w.set_checksum(0x5e7a);
  w.set_src(src);
  w.set_dst(dst);
  EXPECT_EQ(buf, lit);

  // Flag accessors on the other polarity: neither DF nor MF, offset 0.
  const Bytes<20> clear = {0x46, 0, 0, 0, 0, 0, 0x00, 0x00};
  Ipv4View<const uint8_t> c(clear.data());
  EXPECT_EQ(c.ihl(), 6);
  EXPECT_EQ(c.header_len(), 24u);
  EXPECT_FALSE(c.dont_fragment());
  EXPECT_FALSE(c.more_fragments());
  EXPECT_EQ(c.frag_offset(), 0);
}

TEST(HeaderViews, Ipv4Checksum) {
  // The classic RFC 1071 example header (checksum 0xb861).
  Bytes<20> h = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  EXPECT_EQ(inet_checksum(h.data(), h.size()), 0xb861);
  store_be16(h.data() + 10, 0xb861);
  EXPECT_EQ(inet_checksum(h.data(), h.size()), 0);
  // The golden WRITE_ONLY frame's IPv4 header verifies and its checksum is 0x7f4d.
  EXPECT_EQ(inet_checksum(kWriteSmallFrame.data() + 14, 20), 0);
  EXPECT_EQ(Ipv4View<const uint8_t>(kWriteSmallFrame.data() + 14).checksum(), 0x7f4d);
  // Odd length: the last byte is the high half of a word.
  const uint8_t odd[3] = {0x12, 0x34, 0x56};
  EXPECT_EQ(inet_checksum(odd, 3), uint16_t(~(0x1234 + 0x5600)));
}

TEST(HeaderViews, Ipv6) {
  // version 6 | traffic class 0xb9 | flow label 0x5a5a5 | payload length 0x0134 | next 17 |
  // hop limit 0x3f | fe80::1122:3344:5566:7788 -> fe80::99aa:bbcc:ddee:ff01
  const Bytes<40> lit = {0x6b, 0x95, 0xa5, 0xa5, 0x01, 0x34, 0x11, 0x3f,
                         0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
                         0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01};
  expect_size<Ipv6View>(lit);
  Ipv6View<const uint8_t> r(lit.data());
  EXPECT_EQ(r.version(), 6);
  EXPECT_EQ(r.traffic_class(), 0xb9);
  EXPECT_EQ(r.dscp(), 46);
  EXPECT_EQ(r.ecn(), 1);
  EXPECT_EQ(r.flow_label(), 0x5a5a5u);
  EXPECT_EQ(r.payload_len(), 0x0134);
  EXPECT_EQ(r.next_header(), 17);
  EXPECT_EQ(r.hop_limit(), 0x3f);
  EXPECT_EQ(r.src(), lit.data() + 8);
  EXPECT_EQ(r.dst(), lit.data() + 24);

  Bytes<40> buf{};
  Ipv6View<uint8_t> w(buf.data());
  w.set_vtf(0xb9, 0x5a5a5);
  w.set_payload_len(0x0134);
  w.set_next_header(17);
  w.set_hop_limit(0x3f);
  w.set_src(lit.data() + 8);
  w.set_dst(lit.data() + 24);
  EXPECT_EQ(buf, lit);

  // Flow label wider than 20 bits is cut, not spilled into the traffic class.
  Bytes<40> b2{};
  Ipv6View<uint8_t>(b2.data()).set_vtf(0x00, 0xFFFFFFFF);
  EXPECT_EQ(b2[0], 0x60);
  EXPECT_EQ(b2[1], 0x0f);
}

TEST(HeaderViews, Udp) {
  const Bytes<8> lit = {0xc2, 0xd9, 0x12, 0xb7, 0x00, 0x68, 0xab, 0xcd};
  expect_size<UdpView>(lit);
  UdpView<const uint8_t> r(lit.data());
  EXPECT_EQ(r.src_port(), 0xc2d9);
  EXPECT_EQ(r.dst_port(), 4791);
  EXPECT_EQ(r.length(), 0x68);
  EXPECT_EQ(r.checksum(), 0xabcd);

  Bytes<8> buf{};
  UdpView<uint8_t> w(buf.data());
  w.set_src_port(0xc2d9);
  w.set_dst_port(kRoceV2Port);
  w.set_length(0x68);
  w.set_checksum(0xabcd);
  EXPECT_EQ(buf, lit);
}

TEST(HeaderViews, Bth) {
  // opcode 0x0b | SE M pad=2 TVer=5 (0xe5) | P_Key 0x7fa3 | FECN, resv6a 0x15 (0x95) |
  // QP 0x123456 | AckReq, resv7 0x2a (0xaa) | PSN 0xabcdef
  const Bytes<12> lit = {0x0b, 0xe5, 0x7f, 0xa3, 0x95, 0x12, 0x34, 0x56, 0xaa, 0xab, 0xcd, 0xef};
  expect_size<BthView>(lit);
  BthView<const uint8_t> r(lit.data());
  EXPECT_EQ(r.opcode(), 0x0b);
  EXPECT_TRUE(r.solicited());
  EXPECT_TRUE(r.migreq());
  EXPECT_EQ(r.pad_count(), 2);
  EXPECT_EQ(r.tver(), 5);
  EXPECT_EQ(r.pkey(), 0x7fa3);
  EXPECT_TRUE(r.fecn());
  EXPECT_FALSE(r.becn());
  EXPECT_EQ(r.resv6a(), 0x15);
  EXPECT_EQ(r.dest_qp(), 0x123456u);
  EXPECT_TRUE(r.ack_req());
  EXPECT_EQ(r.resv7(), 0x2a);
  EXPECT_EQ(r.psn(), 0xabcdefu);

  Bytes<12> buf{};
  BthView<uint8_t> w(buf.data());
  w.set_opcode(0x0b);
  w.set_flags(true, true, 2, 5);
  w.set_pkey(0x7fa3);
  w.set_byte4(true, false, 0x15);
  w.set_dest_qp(0x123456);
  w.set_ack_req(true, 0x2a);
  w.set_psn(0xabcdef);
  EXPECT_EQ(buf, lit);

  // The other polarity of every flag: M only, pad 1, BECN only, no AckReq.
  const Bytes<12> lit2 = {0x81, 0x50, 0xff, 0xff, 0x40, 0x00, 0x00, 0x1b, 0x00, 0x00, 0x01, 0x00};
  BthView<const uint8_t> r2(lit2.data());
  EXPECT_FALSE(r2.solicited());
  EXPECT_TRUE(r2.migreq());
  EXPECT_EQ(r2.pad_count(), 1);
  EXPECT_EQ(r2.tver(), 0);
  EXPECT_FALSE(r2.fecn());
  EXPECT_TRUE(r2.becn());
  EXPECT_EQ(r2.resv6a(), 0);
  EXPECT_FALSE(r2.ack_req());
  EXPECT_EQ(r2.resv7(), 0);
  EXPECT_EQ(r2.dest_qp(), 0x1bu);
  EXPECT_EQ(r2.psn(), 0x100u);
  Bytes<12> buf2{};
  BthView<uint8_t> w2(buf2.data());
  w2.set_opcode(0x81);
  w2.set_flags(false, true, 1, 0);
  w2.set_pkey(0xffff);
  w2.set_byte4(false, true, 0);
  w2.set_dest_qp(0x1b);
  w2.set_ack_req(false);
  w2.set_psn(0x100);
  EXPECT_EQ(buf2, lit2);
  // Out-of-range arguments are masked to their field, never spilled into a neighbour.
  Bytes<12> buf3{};
  BthView<uint8_t> w3(buf3.data());
  w3.set_flags(false, false, 0xff, 0xff);
  w3.set_byte4(false, false, 0xff);
  w3.set_ack_req(false, 0xff);
  EXPECT_EQ(buf3[1], 0x3f);
  EXPECT_EQ(buf3[4], 0x3f);
  EXPECT_EQ(buf3[8], 0x7f);
}

TEST(HeaderViews, Reth) {
  const Bytes<16> lit = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
                         0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10};
  expect_size<RethView>(lit);
  RethView<const uint8_t> r(lit.data());
  EXPECT_EQ(r.va(), 0x0102030405060708ull);
  EXPECT_EQ(r.rkey(), 0x090a0b0cu);
  EXPECT_EQ(r.dma_len(), 0x0d0e0f10u);

  Bytes<16> buf{};
  RethView<uint8_t> w(buf.data());
  w.set_va(0x0102030405060708ull);
  w.set_rkey(0x090a0b0c);
  w.set_dma_len(0x0d0e0f10);
  EXPECT_EQ(buf, lit);
}

TEST(HeaderViews, Aeth) {
  const Bytes<4> lit = {0x62, 0x12, 0x34, 0x56};
  expect_size<AethView>(lit);
  AethView<const uint8_t> r(lit.data());
  EXPECT_EQ(r.syndrome(), 0x62);
  EXPECT_EQ(r.msn(), 0x123456u);

  Bytes<4> buf{};
  AethView<uint8_t> w(buf.data());
  w.set_syndrome(0x62);
  w.set_msn(0x123456);
  EXPECT_EQ(buf, lit);
}

TEST(HeaderViews, AtomicEth) {
  Bytes<28> lit{};
  for (size_t i = 0; i < lit.size(); ++i) lit[i] = uint8_t(i + 1);
  expect_size<AtomicEthView>(lit);
  AtomicEthView<const uint8_t> r(lit.data());
  EXPECT_EQ(r.va(), 0x0102030405060708ull);
  EXPECT_EQ(r.rkey(), 0x090a0b0cu);
  EXPECT_EQ(r.swap_add(), 0x0d0e0f1011121314ull);
  EXPECT_EQ(r.compare(), 0x15161718191a1b1cull);

  Bytes<28> buf{};
  AtomicEthView<uint8_t> w(buf.data());
  w.set_va(0x0102030405060708ull);
  w.set_rkey(0x090a0b0c);
  w.set_swap_add(0x0d0e0f1011121314ull);
  w.set_compare(0x15161718191a1b1cull);
  EXPECT_EQ(buf, lit);
}

TEST(HeaderViews, AtomicAckEth) {
  const Bytes<8> lit = {0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
  expect_size<AtomicAckEthView>(lit);
  EXPECT_EQ(AtomicAckEthView<const uint8_t>(lit.data()).orig(), 0x8877665544332211ull);
  Bytes<8> buf{};
  AtomicAckEthView<uint8_t>(buf.data()).set_orig(0x8877665544332211ull);
  EXPECT_EQ(buf, lit);
}

TEST(HeaderViews, ImmDt) {
  const Bytes<4> lit = {0xde, 0xad, 0xbe, 0xef};
  expect_size<ImmDtView>(lit);
  EXPECT_EQ(ImmDtView<const uint8_t>(lit.data()).imm(), 0xdeadbeefu);
  Bytes<4> buf{};
  ImmDtView<uint8_t>(buf.data()).set_imm(0xdeadbeef);
  EXPECT_EQ(buf, lit);
}

TEST(HeaderViews, Ieth) {
  const Bytes<4> lit = {0x12, 0x34, 0x56, 0x78};
  expect_size<IethView>(lit);
  EXPECT_EQ(IethView<const uint8_t>(lit.data()).rkey(), 0x12345678u);
  Bytes<4> buf{};
  IethView<uint8_t>(buf.data()).set_rkey(0x12345678);
  EXPECT_EQ(buf, lit);
}

TEST(HeaderViews, Xrceth) {
  // Reserved 0x5a, XRC SRQ number 0x123456 (IBA annex A14: bits 31:24 reserved, 23:0 XRCSRQ).
  const Bytes<4> lit = {0x5a, 0x12, 0x34, 0x56};
  expect_size<XrcethView>(lit);
  XrcethView<const uint8_t> r(lit.data());
  EXPECT_EQ(r.srqn(), 0x123456u);
  EXPECT_EQ(r.resv(), 0x5a);
  Bytes<4> buf{};
  XrcethView<uint8_t>(buf.data()).set(0xff123456, 0x5a);  // the number is 24 bits
  EXPECT_EQ(buf, lit);
}

TEST(HeaderViews, Feth) {
  // Reserved bits 0x2a5 above bit 6, selectivity 1 (the whole MR), placement 3 (global |
  // persistent): 0x2a5 << 6 | 1 << 4 | 3 = 0x0000a953.
  const Bytes<4> lit = {0x00, 0x00, 0xa9, 0x53};
  expect_size<FethView>(lit);
  FethView<const uint8_t> r(lit.data());
  EXPECT_EQ(r.placement(), 3);
  EXPECT_EQ(r.selectivity(), 1);
  EXPECT_EQ(r.resv(), 0x2a5u);
  Bytes<4> buf{};
  FethView<uint8_t>(buf.data()).set(3, 1, 0x2a5);
  EXPECT_EQ(buf, lit);
  // What a FLUSH of a range to global visibility carries (rxe's feth_init(pkt, 1, 0)).
  FethView<uint8_t>(buf.data()).set(1, 0);
  EXPECT_EQ(buf, (Bytes<4>{0x00, 0x00, 0x00, 0x01}));
}

TEST(HeaderViews, Deth) {
  // Q_Key 0x11223344 | reserved 0x55 | source QP 0x667788
  const Bytes<8> lit = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
  expect_size<DethView>(lit);
  DethView<const uint8_t> r(lit.data());
  EXPECT_EQ(r.qkey(), 0x11223344u);
  EXPECT_EQ(r.resv(), 0x55);
  EXPECT_EQ(r.src_qp(), 0x667788u);

  Bytes<8> buf{};
  DethView<uint8_t> w(buf.data());
  w.set_qkey(0x11223344);
  w.set_src_qp(0x667788, 0x55);
  EXPECT_EQ(buf, lit);
  // Default reserved byte is zero.
  Bytes<8> buf2{};
  DethView<uint8_t>(buf2.data()).set_src_qp(0x667788);
  EXPECT_EQ(buf2, (Bytes<8>{0, 0, 0, 0, 0, 0x66, 0x77, 0x88}));
}

TEST(HeaderViews, Cnp) {
  Bytes<16> lit{};
  for (size_t i = 0; i < lit.size(); ++i) lit[i] = uint8_t(0xf0 - i);
  expect_size<CnpView>(lit);
  CnpView<const uint8_t> r(lit.data());
  EXPECT_EQ(r.reserved(), lit.data());
  Bytes<16> buf{};
  CnpView<uint8_t>(buf.data()).set_reserved(lit.data());
  EXPECT_EQ(buf, lit);
}

// The golden WRITE_ONLY frame, built from a Packet filled in by hand, byte for byte.
TEST(WholePacket, WriteOnlyFromGoldenCaptureBuildsByteForByte) {
  std::vector<uint8_t> payload;
  for (uint8_t b = 0x11; b <= 0x50; ++b) payload.push_back(b);
  ASSERT_EQ(payload.size(), 64u);

  Packet p;
  p.eth_dst = {0x02, 0x00, 0xc6, 0x12, 0x01, 0x02};
  p.eth_src = {0x02, 0x00, 0xc6, 0x12, 0x01, 0x01};
  p.ip_version = 4;
  p.ip_src = {198, 18, 1, 1};
  p.ip_dst = {198, 18, 1, 2};
  p.dscp = 0;
  p.ecn = 0;
  p.ttl = 64;
  p.ipv4_id = 0x2cfc;
  p.ipv4_flags_frag = 0x4000;
  p.udp_sport = 49881;
  p.udp_dport = 4791;
  p.opcode = op::kWriteOnly;
  p.pkey = 0xffff;
  p.dest_qp = 0x1b;
  p.ack_req = true;
  p.psn = 0x100;
  p.reth = {0x000055e280507000ull, 0x0c30, 64};
  p.payload = payload;

  EXPECT_EQ(header_len(p), 14u + 20 + 8 + 12 + 16);
  EXPECT_EQ(frame_len(p), kWriteSmallFrame.size());
  std::vector<uint8_t> out(frame_len(p), 0xAA);
  BuildResult b = build(p, out);
  ASSERT_TRUE(b.ok()) << error_name(b.error);
  EXPECT_EQ(b.len, kWriteSmallFrame.size());
  EXPECT_EQ(out, kWriteSmallFrame) << uroce::proto::test::hex(out);

  // And the other way: parse the literal and read back every field.
  Packet q;
  ParseResult r = parse(kWriteSmallFrame, q);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(q.eth_dst, p.eth_dst);
  EXPECT_EQ(q.eth_src, p.eth_src);
  EXPECT_EQ(q.vlan_count, 0);
  EXPECT_EQ(q.ip_version, 4);
  EXPECT_EQ(q.ip_src, p.ip_src);
  EXPECT_EQ(q.ip_dst, p.ip_dst);
  EXPECT_EQ(q.ttl, 64);
  EXPECT_EQ(q.ipv4_id, 0x2cfc);
  EXPECT_EQ(q.ipv4_flags_frag, 0x4000);
  EXPECT_EQ(q.udp_sport, 49881);
  EXPECT_FALSE(q.udp_checksum);
  EXPECT_EQ(q.opcode, op::kWriteOnly);
  EXPECT_EQ(q.info().name, "RC_RDMA_WRITE_ONLY");
  EXPECT_FALSE(q.solicited);
  EXPECT_EQ(q.pkey, 0xffff);
  EXPECT_EQ(q.dest_qp, 0x1bu);
  EXPECT_TRUE(q.ack_req);
  EXPECT_EQ(q.psn, 0x100u);
  EXPECT_EQ(q.reth.va, 0x000055e280507000ull);
  EXPECT_EQ(q.reth.rkey, 0x0c30u);
  EXPECT_EQ(q.reth.dma_len, 64u);
  EXPECT_EQ(std::vector<uint8_t>(q.payload.begin(), q.payload.end()), payload);
  EXPECT_EQ(q.icrc_wire, 0x6f9414e9u);
  EXPECT_EQ(q.icrc_computed, 0x6f9414e9u);
  EXPECT_TRUE(q.l2_trailer.empty());
}

// FLUSH (0x1c) and ATOMIC WRITE (0x1d), IBA 1.5 annex A19: the transport bytes after the UDP
// header written out by hand, field by field. rxe (rxe_opcode.c: BTH, FETH, RETH for FLUSH;
// BTH, RETH and the payload for ATOMIC WRITE) lays them out the same way; the lab's Linux 6.1
// predates both opcodes, so no capture of a peer's frame backs this: the layout is checked
// against the kernel's and rdma-core's definitions (docs/wire.md).
TEST(WholePacket, FlushAndAtomicWriteTransportBytes) {
  using uroce::proto::test::make_packet;
  Packet p = make_packet(op::kFlush, 4, 0, {});
  p.solicited = false;
  p.pkey = 0xffff;
  p.dest_qp = 0x123456;
  p.ack_req = true;
  p.psn = 0x000102;
  p.feth = {2, 1, 0};  // persistent, the whole MR
  p.reth = {0x1122334455667788ull, 0xa1b2c3d4, 0x1000};
  std::vector<uint8_t> f = uroce::proto::test::build_frame(p);
  const size_t bth = uroce::proto::test::l3_offset(f) + 20 + 8;
  const std::vector<uint8_t> want_flush = {
      0x1c, 0x00, 0xff, 0xff, 0x00, 0x12, 0x34, 0x56, 0x80, 0x00, 0x01, 0x02,  // BTH: FLUSH, pad 0, AckReq
      0x00, 0x00, 0x00, 0x12,                                                  // FETH: sel 1, plt 2
      0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xa1, 0xb2, 0xc3, 0xd4,  // RETH: VA, R_Key
      0x00, 0x00, 0x10, 0x00,                                                  //       DMA length
  };
  ASSERT_EQ(f.size(), bth + want_flush.size() + kIcrcSize);  // no payload
  EXPECT_EQ(std::vector<uint8_t>(f.begin() + long(bth), f.end() - long(kIcrcSize)), want_flush);
  Packet q;
  ASSERT_TRUE(parse(f, q).ok());
  EXPECT_EQ(q.info().name, "RC_FLUSH");
  EXPECT_EQ(q.feth.placement, 2);
  EXPECT_EQ(q.feth.selectivity, 1);
  EXPECT_EQ(q.reth.dma_len, 0x1000u);

  const std::vector<uint8_t> value = {0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87};
  Packet a = make_packet(op::kAtomicWrite, 4, 0, value);
  a.solicited = false;
  a.pkey = 0xffff;
  a.dest_qp = 0x123456;
  a.ack_req = true;
  a.psn = 0x000103;
  a.reth = {0x1122334455667788ull, 0xa1b2c3d4, 8};
  f = uroce::proto::test::build_frame(a);
  const std::vector<uint8_t> want_aw = {
      0x1d, 0x00, 0xff, 0xff, 0x00, 0x12, 0x34, 0x56, 0x80, 0x00, 0x01, 0x03,  // BTH: ATOMIC WRITE
      0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xa1, 0xb2, 0xc3, 0xd4,  // RETH
      0x00, 0x00, 0x00, 0x08,                                                  //   length 8
      0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87,                          // the 8 bytes, as given
  };
  ASSERT_EQ(f.size(), bth + want_aw.size() + kIcrcSize);
  EXPECT_EQ(std::vector<uint8_t>(f.begin() + long(bth), f.end() - long(kIcrcSize)), want_aw);
  ASSERT_TRUE(parse(f, q).ok());
  EXPECT_EQ(q.info().name, "RC_ATOMIC_WRITE");
  EXPECT_EQ(std::vector<uint8_t>(q.payload.begin(), q.payload.end()), value);
  // Neither is a UC or UD opcode.
  EXPECT_FALSE(opcode_info(op::kUc | op::kFlush).valid);
  EXPECT_FALSE(opcode_info(op::kUc | op::kAtomicWrite).valid);
}

// XRC (IBA annex A14): a request carries the XRCETH right after the BTH and before the RETH,
// AtomicETH, ImmDt or IETH (the layout of rxe's posted XRC patches and of libtins); responses
// are RC's. tshark 4.0 names XRC opcodes but decodes nothing after their BTH (tests/oracle).
TEST(WholePacket, XrcTransportBytes) {
  using uroce::proto::test::make_packet;
  const std::vector<uint8_t> pl = {0xa5, 0x5a, 0x01};
  Packet p = make_packet(op::kXrc | op::kWriteOnlyImm, 4, 0, pl);
  p.solicited = true;
  p.pkey = 0xffff;
  p.dest_qp = 0x000abc;
  p.ack_req = true;
  p.psn = 0x010203;
  p.xrceth = {0x00cafe, 0};
  p.reth = {0x0000000100002000ull, 0x11223344, 3};
  p.imm = 0xdeadbeef;
  std::vector<uint8_t> f = uroce::proto::test::build_frame(p);
  const size_t bth = uroce::proto::test::l3_offset(f) + 20 + 8;
  const std::vector<uint8_t> want = {
      0xab, 0x90, 0xff, 0xff, 0x00, 0x00, 0x0a, 0xbc, 0x80, 0x01, 0x02, 0x03,  // BTH: XRC WRITE ONLY imm, SE, pad 1
      0x00, 0x00, 0xca, 0xfe,                                                  // XRCETH: SRQ 0x00cafe
      0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x20, 0x00, 0x11, 0x22, 0x33, 0x44,  // RETH: VA, R_Key
      0x00, 0x00, 0x00, 0x03,                                                  //       DMA length
      0xde, 0xad, 0xbe, 0xef,                                                  // ImmDt
      0xa5, 0x5a, 0x01, 0x00,                                                  // payload, 1 pad byte
  };
  ASSERT_EQ(f.size(), bth + want.size() + kIcrcSize);
  EXPECT_EQ(std::vector<uint8_t>(f.begin() + long(bth), f.end() - long(kIcrcSize)), want);
  Packet q;
  ASSERT_TRUE(parse(f, q).ok());
  EXPECT_EQ(q.info().name, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE");
  EXPECT_EQ(q.info().transport, Transport::XRC);
  EXPECT_EQ(q.xrceth.srqn, 0x00cafeu);
  EXPECT_EQ(q.reth.rkey, 0x11223344u);
  EXPECT_EQ(q.imm, 0xdeadbeefu);
  EXPECT_EQ(std::vector<uint8_t>(q.payload.begin(), q.payload.end()), pl);

  // An XRC ACK: BTH and AETH, no XRCETH.
  Packet a = make_packet(op::kXrc | op::kAck, 4, 0, {});
  a.pkey = 0xffff;
  a.dest_qp = 0x000abc;
  a.psn = 0x010203;
  a.aeth = {0x1f, 0x000007};
  f = uroce::proto::test::build_frame(a);
  ASSERT_EQ(f.size(), bth + 12 + 4 + kIcrcSize);
  EXPECT_EQ(f[bth], 0xb1);
  EXPECT_EQ(std::vector<uint8_t>(f.begin() + long(bth) + 12, f.begin() + long(bth) + 16),
            (std::vector<uint8_t>{0x1f, 0x00, 0x00, 0x07}));
}

TEST(WholePacket, BuildReportsErrors) {
  const std::vector<uint8_t> pl = uroce::proto::test::seq_payload(8);
  Packet p = uroce::proto::test::make_packet(op::kSendOnly, 4, 0, pl);
  std::vector<uint8_t> small(frame_len(p) - 1);
  EXPECT_EQ(build(p, small).error, BuildError::BufferTooSmall);
  EXPECT_EQ(build(p, small).len, frame_len(p));
  Packet bad = p;
  bad.opcode = 0x15;
  std::vector<uint8_t> big(4096);
  EXPECT_EQ(build(bad, big).error, BuildError::InvalidOpcode);
  Packet ack = p;
  ack.opcode = op::kAck;  // payload still set
  EXPECT_EQ(build(ack, big).error, BuildError::PayloadNotAllowed);
  std::vector<uint8_t> huge(70000);
  Packet longp = p;
  longp.payload = huge;
  std::vector<uint8_t> out(frame_len(longp));
  EXPECT_EQ(build(longp, out).error, BuildError::TooLong);
}
