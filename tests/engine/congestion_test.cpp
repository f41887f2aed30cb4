// ECN and congestion notification (RoCEv2 Annex A17.9) on the FakeLink, under the virtual
// clock: CNPs received are counted and change nothing; a CE-marked frame makes its QP send a
// CNP, at most one per interval; the ECN field of every frame follows the device's config and
// the DSCP the QP's traffic class; our CNP next to the one a ConnectX-4 Lx sent (golden).
#include <gtest/gtest.h>

#include <string>

#include "proto/checksum.hpp"
#include "proto/entropy.hpp"
#include "proto/icrc.hpp"
#include "tests/support/golden.hpp"
#include "tests/support/harness.hpp"
#include "tools/pcap/pcapio.hpp"

namespace uroce::test {
namespace {

namespace op = proto::op;

// Byte offsets in an untagged IPv4 RoCEv2 frame.
constexpr size_t kIp = 14, kUdp = 34, kBth = 42;

std::vector<uint8_t> golden_cnp() {
  pcapio::Capture cap;
  std::string err;
  EXPECT_TRUE(pcapio::read_file(golden_path("hardware/cnp_connectx4lx_from_scapy_roce_uts.pcap"),
                                cap, err))
      << err;
  EXPECT_EQ(cap.frames.size(), 1u);
  return cap.frames.empty() ? std::vector<uint8_t>{} : cap.frames[0].bytes;
}

// Recomputes the IPv4 header checksum and the ICRC of an untagged IPv4 RoCEv2 frame after a
// test changed some of its bytes.
void reseal(std::vector<uint8_t>& f) {
  f[kIp + 10] = f[kIp + 11] = 0;
  proto::store_be16(&f[kIp + 10], proto::inet_checksum(&f[kIp], 20));
  const size_t ip_total = proto::load_be16(&f[kIp + 2]);
  proto::store_le32(&f[kIp + ip_total - 4], proto::icrc_compute(&f[kIp], ip_total - 4, 20));
}

// The addresses of the golden CNP: it went from 10.0.17.1 (the notification point, our A) to
// 10.0.18.1 (the sender of the congested traffic, our B).
PairOptions golden_addresses() {
  PairOptions o;
  o.config_a = [](Device::Config& c) {
    c.mac = {0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32};
    c.gid = v4gid(10, 0, 17, 1);
  };
  o.config_b = [](Device::Config& c) {
    c.mac = {0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2};
    c.gid = v4gid(10, 0, 18, 1);
  };
  return o;
}

struct Frames {
  std::vector<std::vector<uint8_t>> all;
  std::vector<proto::Packet> of(uint8_t opcode) const {
    std::vector<proto::Packet> out;
    for (const auto& f : all) {
      proto::Packet p;
      EXPECT_TRUE(proto::parse(f, p).ok());
      if (p.opcode == opcode) out.push_back(p);
    }
    return out;
  }
  size_t count(uint8_t opcode) const { return of(opcode).size(); }
};

// A CE-marked (or otherwise marked) RDMA WRITE ONLY of 4 bytes from A's QP to B's, at `psn`.
proto::Packet marked_write(Pair& pr, uint32_t psn, uint8_t ecn, const std::vector<uint8_t>& data) {
  proto::Packet p = forge(pr.a, pr.b, op::kWriteOnly, psn);
  p.reth = {pr.b.addr(), pr.b.mr->rkey, 4};
  p.payload = {data.data(), 4};
  p.ecn = ecn;
  return p;
}

// A CNP as A's QP would send it to B's QP.
proto::Packet cnp_to(const Endpoint& from, const Endpoint& to) {
  proto::Packet c = forge(from, to, op::kCnp, 0);
  c.ack_req = false;
  c.becn = true;
  return c;
}

// ---- Receiving CNPs ---------------------------------------------------------------------------

TEST(Cnp, ToALiveQpIsCountedAndChangesNothing) {
  Pair pr;
  Frames out;
  pr.wire.b().tap = [&](const uint8_t* d, uint32_t n) { out.all.emplace_back(d, d + n); };
  const std::string before = pr.b.qp->describe();
  const Counters c0 = pr.b.dev->counters();
  for (int i = 0; i < 3; ++i) inject(pr.wire.b(), cnp_to(pr.a, pr.b));
  for (int i = 0; i < 4; ++i) pr.b.dev->progress();
  EXPECT_TRUE(out.all.empty()) << "a CNP is never answered (no ACK, no NAK)";
  EXPECT_EQ(pr.b.qp->counters().cnp_rcvd, 3u);
  const Counters c = pr.b.dev->counters();
  EXPECT_EQ(c.cnp_rcvd, 3u);
  EXPECT_EQ(c.malformed, c0.malformed);
  EXPECT_EQ(c.icrc_errors, c0.icrc_errors);
  EXPECT_EQ(c.dropped_unknown_qp + c.dropped_bad_state + c.dropped_pkey + c.dropped_source + c.ghost_responses,
            c0.dropped_unknown_qp + c0.dropped_bad_state + c0.dropped_pkey + c0.dropped_source + c0.ghost_responses);
  EXPECT_EQ(c.out_of_seq_request + c.other_naks_sent + c.send_rnr_err + c.acks_sent, 0u);
  EXPECT_EQ(pr.b.qp->state(), QpState::Rts);
  EXPECT_EQ(pr.b.qp->describe(), before);
  // The QP carries on: a WRITE from A lands and completes.
  std::vector<uint8_t> src(3000, 0x5A);
  Mr* mr = pr.a.dev->reg_mr(pr.a.pd, src.data(), src.size(), kLocalWrite);
  Sge s{reinterpret_cast<uintptr_t>(src.data()), uint32_t(src.size()), mr->lkey};
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, wr_to(pr.b, 1, WrOpcode::RdmaWrite, &s)), 0);
  Wc wc;
  ASSERT_TRUE(pr.next_wc(pr.a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(std::memcmp(pr.b.buf(), src.data(), src.size()), 0);
}

TEST(Cnp, ToAnUnknownQpIsACountedDrop) {
  Pair pr;
  proto::Packet c = cnp_to(pr.a, pr.b);
  c.dest_qp = pr.b.qp->qpn() ^ 0x800000;
  inject(pr.wire.b(), c);
  proto::Packet wrong_pkey = cnp_to(pr.a, pr.b);
  wrong_pkey.pkey = 0x8001;
  inject(pr.wire.b(), wrong_pkey);
  for (int i = 0; i < 3; ++i) pr.b.dev->progress();
  const Counters k = pr.b.dev->counters();
  EXPECT_EQ(k.dropped_unknown_qp, 1u);
  EXPECT_EQ(k.dropped_pkey, 1u);
  EXPECT_EQ(k.cnp_rcvd, 0u);
  EXPECT_EQ(k.malformed, 0u);
  EXPECT_EQ(pr.b.qp->state(), QpState::Rts);
}

TEST(Cnp, TheGoldenConnectXCnpIsAcceptedAndCounted) {
  Pair pr(golden_addresses());
  Frames out;
  pr.wire.b().tap = [&](const uint8_t* d, uint32_t n) { out.all.emplace_back(d, d + n); };
  const std::vector<uint8_t> g = golden_cnp();
  ASSERT_EQ(g.size(), 74u);
  const std::string before = pr.b.qp->describe();
  // As captured: to QP 0x000118, which B does not have.
  ASSERT_NE(pr.b.qp->qpn(), 0x118u);
  pr.wire.b().inject(g.data(), uint32_t(g.size()));
  // The same frame to B's QP: only the destination QP (and so the ICRC) changed; the UDP
  // source port 0, TOS 0xc2 (DSCP 48, ECT(0)), IP ID, TTL and the BTH flags are ConnectX's.
  std::vector<uint8_t> h = g;
  proto::store_be24(&h[kBth + 5], pr.b.qp->qpn());
  reseal(h);
  pr.wire.b().inject(h.data(), uint32_t(h.size()));
  for (int i = 0; i < 3; ++i) pr.b.dev->progress();
  const Counters k = pr.b.dev->counters();
  EXPECT_EQ(k.dropped_unknown_qp, 1u);
  EXPECT_EQ(k.cnp_rcvd, 1u);
  EXPECT_EQ(pr.b.qp->counters().cnp_rcvd, 1u);
  EXPECT_EQ(k.malformed + k.icrc_errors + k.dropped_source + k.dropped_pkey, 0u);
  EXPECT_TRUE(out.all.empty());
  EXPECT_EQ(pr.b.qp->describe(), before);
}

// ---- Sending CNPs (notification point) --------------------------------------------------------

// Injects CE-marked WRITEs into B at the given virtual times and counts the CNPs B sends.
void check_cnp_interval(uint64_t interval_ns, bool set_in_config) {
  PairOptions o;
  if (set_in_config) o.config_b = [interval_ns](Device::Config& c) { c.cnp_interval_ns = interval_ns; };
  Pair pr(o);
  Frames out;
  pr.wire.b().tap = [&](const uint8_t* d, uint32_t n) { out.all.emplace_back(d, d + n); };
  const std::vector<uint8_t> data(4, 0x11);
  uint32_t psn = pr.b.qp->expected_psn();
  auto one = [&](uint8_t ecn) {
    inject(pr.wire.b(), marked_write(pr, psn, ecn, data));
    psn = proto::psn_add(psn, 1);
    pr.b.dev->progress();
    pr.b.dev->progress();
  };
  VirtualClock& clk = pr.wire.clock();
  one(2);  // ECT(0) only: no congestion, no CNP
  one(1);  // ECT(1)
  EXPECT_EQ(out.count(op::kCnp), 0u);
  one(3);  // CE: a CNP at once
  EXPECT_EQ(out.count(op::kCnp), 1u);
  one(3);  // same instant: none
  clk.advance(interval_ns - 1);
  one(3);  // 1 ns short of the interval: none
  EXPECT_EQ(out.count(op::kCnp), 1u);
  clk.advance(1);
  one(3);  // the interval has passed: the second CNP
  EXPECT_EQ(out.count(op::kCnp), 2u);
  one(3);
  EXPECT_EQ(out.count(op::kCnp), 2u);
  const Counters& qc = pr.b.qp->counters();
  EXPECT_EQ(qc.ecn_ce_rcvd, 5u);
  EXPECT_EQ(qc.cnp_sent, 2u);
  EXPECT_EQ(pr.b.dev->counters().cnp_sent, 2u);
  // The marked WRITEs themselves were executed and acknowledged as usual.
  EXPECT_EQ(pr.b.qp->expected_psn(), psn);
  EXPECT_GE(out.count(op::kAck), 1u);
  EXPECT_EQ(qc.out_of_seq_request + qc.other_naks_sent, 0u);

  // What the CNP says: to A's QP on A's address, BECN, PSN 0, P_Key, no AckReq, 16 zero
  // bytes, B's UDP source port for this QP pair, DSCP 48, B's ECN (off: Not-ECT).
  for (const proto::Packet& c : out.of(op::kCnp)) {
    EXPECT_EQ(c.dest_qp, pr.a.qp->qpn());
    EXPECT_TRUE(c.becn);
    EXPECT_FALSE(c.fecn);
    EXPECT_FALSE(c.ack_req);
    EXPECT_FALSE(c.solicited);
    EXPECT_EQ(c.psn, 0u);
    EXPECT_EQ(c.pkey, 0xFFFF);
    EXPECT_EQ(c.eth_dst, pr.a.dev->config().mac);
    EXPECT_EQ(std::memcmp(c.ip_dst.data(), pr.a.dev->config().gid.data() + 12, 4), 0);
    EXPECT_EQ(std::memcmp(c.ip_src.data(), pr.b.dev->config().gid.data() + 12, 4), 0);
    EXPECT_EQ(c.udp_sport, proto::udp_source_port(pr.b.qp->qpn(), pr.a.qp->qpn()));
    EXPECT_EQ(c.dscp, 48);
    EXPECT_EQ(c.ecn, 0);
    EXPECT_EQ(c.cnp_reserved, (std::array<uint8_t, 16>{}));
    EXPECT_TRUE(c.payload.empty());
  }
  // A, the sender, accepts both CNPs: counted, nothing else.
  const std::string a_before = pr.a.qp->describe();
  ASSERT_TRUE(pr.run_until([&] { return pr.a.qp->counters().cnp_rcvd == 2; }));
  EXPECT_EQ(pr.a.qp->state(), QpState::Rts);
  EXPECT_EQ(pr.a.dev->counters().malformed + pr.a.dev->counters().dropped_unknown_qp, 0u);
}

TEST(Cnp, CeMarkedFramesGetOneCnpPerDefaultInterval) {
  EXPECT_EQ(Device::Config{}.cnp_interval_ns, 50'000u);
  check_cnp_interval(param::kCnpIntervalNs, false);
}

TEST(Cnp, TheIntervalIsConfigurable) { check_cnp_interval(7'000, true); }

// The path of the second QP pair: both sides use PSN 0x300, READ/atomic depth 1 and an RNR
// timer of 12 (the engine's QpAttr defaults).
Path second_path() {
  Path p;
  p.sq_psn = p.rq_psn = 0x300;
  p.access = kRemoteWrite | kRemoteRead;
  p.max_rd_atomic = 1;
  p.min_rnr_timer = 12;
  return p;
}

TEST(Cnp, TheIntervalIsPerQp) {
  // A second QP pair on the same two devices: each QP of B has its own interval.
  Pair pr;
  Qp* b2 = pr.b.dev->create_qp(pr.b.init_attr());
  Qp* a2 = pr.a.dev->create_qp(pr.a.init_attr());
  ASSERT_TRUE(a2 && b2);
  ASSERT_EQ(connect_qp(*pr.b.dev, b2, *pr.a.dev, *a2, second_path()), 0);
  ASSERT_EQ(connect_qp(*pr.a.dev, a2, *pr.b.dev, *b2, second_path()), 0);
  Frames out;
  pr.wire.b().tap = [&](const uint8_t* d, uint32_t n) { out.all.emplace_back(d, d + n); };
  const std::vector<uint8_t> data(4, 0x22);
  inject(pr.wire.b(), marked_write(pr, pr.b.qp->expected_psn(), 3, data));
  proto::Packet q = marked_write(pr, 0x300, 3, data);
  q.dest_qp = b2->qpn();
  inject(pr.wire.b(), q);
  pr.b.dev->progress();
  const auto cnps = out.of(op::kCnp);
  ASSERT_EQ(cnps.size(), 2u);
  EXPECT_EQ(cnps[0].dest_qp, pr.a.qp->qpn());
  EXPECT_EQ(cnps[1].dest_qp, a2->qpn());
  EXPECT_EQ(pr.b.qp->counters().cnp_sent, 1u);
  EXPECT_EQ(b2->counters().cnp_sent, 1u);
}

TEST(Cnp, UdCnpGoesToTheDatagramsSourceQp) {
  Pair pr;
  Qp* ud = pr.b.dev->create_qp(pr.b.init_attr(QpType::UD));
  ASSERT_NE(ud, nullptr);
  QpAttr a;
  a.qp_state = QpState::Init;
  a.qkey = 0x1111;
  ASSERT_EQ(pr.b.dev->modify_qp(ud, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrQkey), 0);
  a.qp_state = QpState::Rtr;
  ASSERT_EQ(pr.b.dev->modify_qp(ud, a, kAttrState), 0);
  Frames out;
  pr.wire.b().tap = [&](const uint8_t* d, uint32_t n) { out.all.emplace_back(d, d + n); };
  const std::vector<uint8_t> data(8, 0x33);
  proto::Packet p = forge(pr.a, pr.b, op::kUd | op::kSendOnly, 7);
  p.dest_qp = ud->qpn();
  p.ack_req = false;
  p.deth = {0x2222, 0, 0xABCDE};  // the wrong Q_Key: counted, no CNP
  p.payload = {data.data(), data.size()};
  p.ecn = 3;
  inject(pr.wire.b(), p);
  pr.b.dev->progress();
  EXPECT_EQ(out.count(op::kCnp), 0u);
  EXPECT_EQ(ud->counters().ecn_ce_rcvd, 1u);
  p.deth.qkey = 0x1111;
  inject(pr.wire.b(), p);
  pr.b.dev->progress();
  const auto cnps = out.of(op::kCnp);
  ASSERT_EQ(cnps.size(), 1u);
  EXPECT_EQ(cnps[0].dest_qp, 0xABCDEu);
  EXPECT_EQ(cnps[0].eth_dst, pr.a.dev->config().mac);
  EXPECT_EQ(std::memcmp(cnps[0].ip_dst.data(), pr.a.dev->config().gid.data() + 12, 4), 0);
  EXPECT_TRUE(cnps[0].becn);
  EXPECT_EQ(ud->counters().cnp_sent, 1u);
}

// Our CNP, byte for byte next to ConnectX-4 Lx's: the same addresses, ECN ect0 and the default
// CNP DSCP give the same frame except the fields each implementation chooses: the IPv4 ID
// (ConnectX counts, uroce sends 0 with DF like rxe), the UDP source port (ConnectX 0, uroce the
// QP pair's port) and the destination QP (and so the checksum and ICRC).
TEST(Cnp, OurCnpIsTheConnectXCnpButForIdSourcePortAndQp) {
  PairOptions o = golden_addresses();
  auto addr_a = o.config_a;
  o.config_a = [addr_a](Device::Config& c) {
    addr_a(c);
    c.ecn = 2;  // ECT(0), as the golden frame
  };
  Pair pr(o);
  Frames out;
  pr.wire.a().tap = [&](const uint8_t* d, uint32_t n) { out.all.emplace_back(d, d + n); };
  const std::vector<uint8_t> data(4, 0x44);
  proto::Packet p = forge(pr.b, pr.a, op::kWriteOnly, pr.a.qp->expected_psn());
  p.reth = {pr.a.addr(), pr.a.mr->rkey, 4};
  p.payload = {data.data(), 4};
  p.ecn = 3;
  inject(pr.wire.a(), p);
  pr.a.dev->progress();
  std::vector<uint8_t> ours;
  for (const auto& f : out.all)
    if (f.size() > kBth && f[kBth] == op::kCnp) ours = f;
  ASSERT_EQ(ours.size(), 74u);
  const std::vector<uint8_t> g = golden_cnp();
  ASSERT_EQ(g.size(), 74u);
  EXPECT_EQ(proto::load_be24(&ours[kBth + 5]), pr.b.qp->qpn());
  EXPECT_EQ(proto::load_be16(&ours[kUdp]), proto::udp_source_port(pr.a.qp->qpn(), pr.b.qp->qpn()));
  EXPECT_EQ(proto::load_be16(&ours[kIp + 4]), 0u);
  std::copy(&g[kIp + 4], &g[kIp + 6], &ours[kIp + 4]);  // IPv4 ID
  std::copy(&g[kUdp], &g[kUdp + 2], &ours[kUdp]);       // UDP source port
  std::copy(&g[kBth + 5], &g[kBth + 8], &ours[kBth + 5]);  // destination QP
  reseal(ours);
  EXPECT_EQ(ours, g);
  for (size_t i = 0; i < std::min(ours.size(), g.size()); ++i)
    if (ours[i] != g[i]) ADD_FAILURE() << "byte " << i << ": ours 0x" << std::hex << int(ours[i]) << ", ConnectX 0x" << int(g[i]);
}

// ---- ECN marking and traffic class of our own frames -------------------------------------------

// Every frame A and B send during a WRITE, a READ and their ACKs / responses.
Frames traffic(Pair& pr) {
  Frames out;
  pr.wire.a().tap = [&](const uint8_t* d, uint32_t n) { out.all.emplace_back(d, d + n); };
  pr.wire.b().tap = [&](const uint8_t* d, uint32_t n) { out.all.emplace_back(d, d + n); };
  std::vector<uint8_t> src(5000, 0x66);
  Mr* mr = pr.a.dev->reg_mr(pr.a.pd, src.data(), src.size(), kLocalWrite);
  Sge s{reinterpret_cast<uintptr_t>(src.data()), uint32_t(src.size()), mr->lkey};
  EXPECT_EQ(pr.a.dev->post_send(pr.a.qp, wr_to(pr.b, 1, WrOpcode::RdmaWrite, &s)), 0);
  EXPECT_EQ(pr.a.dev->post_send(pr.a.qp, wr_to(pr.b, 2, WrOpcode::RdmaRead, &s)), 0);
  Wc wc;
  EXPECT_TRUE(pr.next_wc(pr.a.scq, wc));
  EXPECT_TRUE(pr.next_wc(pr.a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  pr.wire.a().tap = nullptr;
  pr.wire.b().tap = nullptr;
  EXPECT_GE(out.all.size(), 12u);  // 5 WRITE packets, an ACK, a READ request, 5 responses
  return out;
}

TEST(Ecn, MarkingFollowsTheDeviceConfig) {
  // {configured, expected on the wire}: off, ECT(0), ECT(1); CE is never sent (taken as off).
  const std::pair<uint8_t, uint8_t> cases[] = {{0, 0}, {2, 2}, {1, 1}, {3, 0}};
  for (auto [cfg, want] : cases) {
    PairOptions o;
    o.config_a = o.config_b = [cfg](Device::Config& c) { c.ecn = cfg; };
    Pair pr(o);
    const Frames out = traffic(pr);
    for (const auto& f : out.all) {
      EXPECT_EQ(f[kIp + 1] & 3, want) << "ecn config " << int(cfg);
      EXPECT_EQ(f[kIp + 1] >> 2, 0) << "DSCP from a traffic class of 0";
    }
  }
}

TEST(Ecn, DscpComesFromTheQpsTrafficClassIpv4) {
  PairOptions o;
  o.traffic_class = 26 << 2 | 3;  // DSCP 26 (AF31); the ECN bits of the traffic class are not used
  o.config_a = o.config_b = [](Device::Config& c) { c.ecn = 1; };
  Pair pr(o);
  const Frames out = traffic(pr);
  for (const auto& f : out.all) EXPECT_EQ(f[kIp + 1], 26 << 2 | 1);  // TOS: DSCP 26, ECT(1)
}

TEST(Ecn, DscpComesFromTheQpsTrafficClassIpv6) {
  PairOptions o;
  o.traffic_class = 46 << 2;  // DSCP 46 (EF)
  o.config_a = [](Device::Config& c) {
    c.gid = proto::Ip6{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a};
    c.ecn = 2;
  };
  o.config_b = [](Device::Config& c) {
    c.gid = proto::Ip6{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b};
    c.ecn = 2;
  };
  Pair pr(o);
  const Frames out = traffic(pr);
  for (const auto& f : out.all) {
    ASSERT_EQ(proto::load_be16(&f[12]), proto::kEtherTypeIpv6);
    const uint8_t tclass = uint8_t((f[kIp] & 0x0F) << 4 | f[kIp + 1] >> 4);
    EXPECT_EQ(tclass, 46 << 2 | 2);  // DSCP 46, ECT(0)
  }
}

TEST(Ecn, UdDatagramsTakeDscpFromTheAddressHandle) {
  PairOptions o;
  o.config_a = [](Device::Config& c) { c.ecn = 2; };
  Pair pr(o);
  Qp* ud = pr.a.dev->create_qp(pr.a.init_attr(QpType::UD));
  ASSERT_EQ(ud_up(*pr.a.dev, ud, 5, 0), 0);  // INIT, RTR and RTS each accepted
  AddressVector av;
  av.dgid = pr.b.dev->config().gid;
  av.dmac = pr.b.dev->config().mac;
  av.traffic_class = 10 << 2 | 1;
  Ah* ah = pr.a.dev->create_ah(pr.a.pd, av);
  ASSERT_NE(ah, nullptr);
  Frames out;
  pr.wire.a().tap = [&](const uint8_t* d, uint32_t n) { out.all.emplace_back(d, d + n); };
  Sge s{pr.a.addr(), 16, pr.a.mr->lkey};
  SendWr w = ud_wr(&s, ah, 0x4321, 5);
  ASSERT_EQ(pr.a.dev->post_send(ud, w), 0);
  pr.a.dev->progress();
  ASSERT_EQ(out.all.size(), 1u);
  EXPECT_EQ(out.all[0][kIp + 1], 10 << 2 | 2);  // DSCP 10 from the AH, ECT(0) from the device
}

}  // namespace
}  // namespace uroce::test
