// UD, UD multicast, UC, loopback and per-QP source GIDs: real frames on the FakeLink, bytes checked in
// memory, completions as verbs reports them.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "proto/multicast.hpp"
#include "tests/support/harness.hpp"

namespace uroce::test {
namespace {

namespace op = proto::op;

proto::Ip6 ll(uint8_t last) {
  proto::Ip6 g{};
  g[0] = 0xfe, g[1] = 0x80, g[15] = last;
  return g;
}

// One device on one end of a FakeWire, with a PD, CQs and a registered buffer.
struct Node {
  std::unique_ptr<Device> dev;
  Pd* pd = nullptr;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  std::vector<uint8_t> mem = std::vector<uint8_t>(1 << 16, 0);
  Mr* mr = nullptr;
  uint64_t addr(size_t off = 0) { return reinterpret_cast<uintptr_t>(mem.data() + off); }

  Node(FakeLink& l, VirtualClock& c, uint8_t id) {
    Device::Config cfg;
    cfg.mac = {0x02, 0, 0, 0, 0, id};
    cfg.gids = {v4gid(198, 18, 0, id), ll(id)};  // GID 0: IPv4, GID 1: IPv6 link-local
    cfg.gid = cfg.gids[0];
    cfg.seed = id;
    dev = std::make_unique<Device>(l, c, cfg);
    pd = dev->alloc_pd();
    scq = dev->create_cq(256);
    rcq = dev->create_cq(256);
    mr = dev->reg_mr(pd, mem.data(), mem.size(), kLocalWrite | kRemoteWrite | kRemoteRead);
  }
  Qp* qp(QpType t, Cq* recv_cq = nullptr) {
    QpInitAttr ia;
    ia.pd = pd;
    ia.send_cq = scq;
    ia.recv_cq = recv_cq ? recv_cq : rcq;
    ia.qp_type = t;
    ia.cap.max_send_wr = 64;
    ia.cap.max_recv_wr = 64;
    return dev->create_qp(ia);
  }
  void post_recv(Qp* q, uint64_t id, uint64_t off, uint32_t len) {
    Sge s{addr(off), len, mr->lkey};
    RecvWr r{id, &s, 1};
    ASSERT_EQ(dev->post_recv(q, r), 0);
  }
};

void ud_up(Device& d, Qp* q, uint32_t qkey) { ASSERT_EQ(test::ud_up(d, q, qkey, 0x123), 0); }

// Connects an RC or UC QP to `peer` on `peer_dev`, sending from GID `sgid`.
void connect(Device& d, Qp* q, const Device& peer_dev, const Qp* peer, uint8_t sgid, int dgid_index,
             Mtu mtu = Mtu::M1024) {
  Path p;
  p.mtu = mtu;
  p.sq_psn = p.rq_psn = 0x500;
  p.access = kRemoteWrite | kRemoteRead;
  p.max_rd_atomic = 4;
  p.sgid_index = sgid;
  p.dgid_index = dgid_index;
  ASSERT_EQ(connect_qp(d, q, peer_dev, *peer, p), 0);
}

// An address handle on `from` to GID `index` of `to`.
Ah* ah_to(Node& from, const Node& to, uint8_t index, uint8_t sgid = 0) {
  AddressVector av;
  av.dgid = to.dev->config().gids[index];
  av.dmac = to.dev->config().mac;
  av.sgid_index = sgid;
  return from.dev->create_ah(from.pd, av);
}

struct Two {
  FakeWire wire{4096, 9216, 3};
  Node a{wire.a(), wire.clock(), 10}, b{wire.b(), wire.clock(), 11};
  std::vector<proto::Packet> a_sent;
  std::vector<std::vector<uint8_t>> a_bytes;
  Two() {
    wire.a().tap = [this](const uint8_t* d, uint32_t n) {
      a_bytes.emplace_back(d, d + n);
      proto::Packet p;
      EXPECT_TRUE(proto::parse(a_bytes.back(), p).ok());
      a_sent.push_back(p);
    };
  }
  void run(int rounds = 200) {
    for (int i = 0; i < rounds; ++i) {
      bool did = a.dev->progress();
      did |= b.dev->progress();
      if (!did) wire.clock().advance(2000);
    }
  }
};

// ---- UD ---------------------------------------------------------------------------------------

TEST(Ud, SendWithImmLandsAfterTheGrhWithItsCompletion) {
  Two t;
  Qp* qa = t.a.qp(QpType::UD);
  Qp* qb = t.b.qp(QpType::UD);
  ASSERT_NE(qa, nullptr);
  ASSERT_NE(qb, nullptr);
  ud_up(*t.a.dev, qa, 0x1111);
  ud_up(*t.b.dev, qb, 0x2222);
  AddressVector av;
  av.dgid = t.b.dev->config().gids[0];
  av.dmac = t.b.dev->config().mac;
  av.sgid_index = 0;
  Ah* ah = t.a.dev->create_ah(t.a.pd, av);
  ASSERT_NE(ah, nullptr);
  t.b.post_recv(qb, 7, 0, 40 + 1000);
  for (int i = 0; i < 1000; ++i) t.a.mem[8192 + i] = uint8_t(i * 7);
  Sge s{t.a.addr(8192), 1000, t.a.mr->lkey};
  SendWr wr = signaled_wr(3, &s, WrOpcode::SendWithImm);
  wr.imm_data = 0xDEADBEEF;
  wr.ah = ah;
  wr.remote_qpn = qb->qpn();
  wr.remote_qkey = 0x2222;
  ASSERT_EQ(t.a.dev->post_send(qa, wr), 0);
  t.run();
  Wc wc;
  ASSERT_EQ(t.a.scq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, WcStatus::Success);
  ASSERT_EQ(t.b.rcq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(wc.opcode, WcOpcode::Recv);
  EXPECT_EQ(wc.byte_len, 40u + 1000u);
  EXPECT_EQ(wc.wc_flags, uint32_t(kWcGrh | kWcWithImm));
  EXPECT_EQ(wc.imm_data, 0xDEADBEEFu);
  EXPECT_EQ(wc.src_qp, qa->qpn());
  EXPECT_EQ(wc.qp_num, qb->qpn());
  // The GRH area: 20 zero bytes, then the IPv4 header as received.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(t.b.mem[i], 0) << i;
  EXPECT_EQ(t.b.mem[20], 0x45);
  EXPECT_EQ(std::memcmp(&t.b.mem[20 + 12], t.a.dev->config().gids[0].data() + 12, 4), 0) << "IPv4 source";
  EXPECT_EQ(std::memcmp(&t.b.mem[20 + 16], t.b.dev->config().gids[0].data() + 12, 4), 0) << "IPv4 destination";
  EXPECT_EQ(std::memcmp(&t.b.mem[40], &t.a.mem[8192], 1000), 0);
  // On the wire: UD SEND ONLY with immediate, the DETH with B's Q_Key and A's QPN, no AckReq.
  ASSERT_EQ(t.a_sent.size(), 1u);
  const proto::Packet& p = t.a_sent[0];
  EXPECT_EQ(p.opcode, op::kUd | op::kSendOnlyImm);
  EXPECT_EQ(p.deth.qkey, 0x2222u);
  EXPECT_EQ(p.deth.src_qp, qa->qpn());
  EXPECT_EQ(p.dest_qp, qb->qpn());
  EXPECT_FALSE(p.ack_req);
  EXPECT_EQ(p.psn, 0x123u);
}

// Completion timestamps (ibv_create_cq_ex with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP): a CQ made
// to keep times stamps each CQE with the device clock at the moment it is written; one that is not
// leaves 0.
TEST(Cq, ACqThatKeepsTimesStampsEachCqeWithTheDeviceClockWhenItIsWritten) {
  Two t;
  Cq* timed = t.b.dev->create_cq(16, true);
  ASSERT_NE(timed, nullptr);
  Qp* qb = t.b.qp(QpType::UD, timed);
  Qp* qa = t.a.qp(QpType::UD);
  ASSERT_NE(qa, nullptr);
  ASSERT_NE(qb, nullptr);
  ud_up(*t.a.dev, qa, 0x1111);
  ud_up(*t.b.dev, qb, 0x2222);
  Ah* ah = ah_to(t.a, t.b, 0);
  ASSERT_NE(ah, nullptr);
  Sge s{t.a.addr(8192), 100, t.a.mr->lkey};
  uint64_t written[2] = {};
  for (int k = 0; k < 2; ++k) {
    t.b.post_recv(qb, 20 + k, 0, 40 + 100);
    t.wire.clock().advance(123'456'789);  // the second datagram a good while after the first
    SendWr wr = signaled_wr(3, &s, WrOpcode::Send);
    wr.ah = ah;
    wr.remote_qpn = qb->qpn();
    wr.remote_qkey = 0x2222;
    ASSERT_EQ(t.a.dev->post_send(qa, wr), 0);
    // Step by step: the clock the moment the receive CQE appears is its time.
    for (int i = 0; i < 200 && timed->size() == uint32_t(k); ++i) {
      bool did = t.a.dev->progress();
      did |= t.b.dev->progress();
      if (timed->size() > uint32_t(k)) written[k] = t.wire.clock().now_ns();
      else if (!did) t.wire.clock().advance(1000);
    }
    ASSERT_EQ(timed->size(), uint32_t(k + 1));
  }
  Wc wc[2];
  ASSERT_EQ(timed->poll(wc, 2), 2u);
  EXPECT_EQ(wc[0].completion_ns, written[0]);
  EXPECT_EQ(wc[1].completion_ns, written[1]);
  EXPECT_GE(wc[1].completion_ns - wc[0].completion_ns, 123'456'789u);
  // The sender's CQ does not keep times.
  ASSERT_EQ(t.a.scq->poll(wc, 2), 2u);
  EXPECT_EQ(wc[0].completion_ns, 0u);
  EXPECT_EQ(wc[1].completion_ns, 0u);
}

TEST(Ud, QkeyNoReceiveAndShortBufferAreCountedOrCompletedNeverFatal) {
  Two t;
  Qp* qa = t.a.qp(QpType::UD);
  Qp* qb = t.b.qp(QpType::UD);
  ud_up(*t.a.dev, qa, 0x1111);
  ud_up(*t.b.dev, qb, 0x2222);
  Ah* ah = ah_to(t.a, t.b, 0);
  Sge s{t.a.addr(), 100, t.a.mr->lkey};
  SendWr wr = ud_wr(&s, ah, qb->qpn(), 0x3333);  // a wrong Q_Key
  ASSERT_EQ(t.a.dev->post_send(qa, wr), 0);
  t.run();
  EXPECT_EQ(qb->counters().dropped_qkey, 1u);
  wr.remote_qkey = 0x80000000;  // top bit: A's own Q_Key (0x1111): wrong too
  ASSERT_EQ(t.a.dev->post_send(qa, wr), 0);
  t.run();
  EXPECT_EQ(qb->counters().dropped_qkey, 2u);
  wr.remote_qkey = 0x2222;  // right, but nothing posted
  ASSERT_EQ(t.a.dev->post_send(qa, wr), 0);
  t.run();
  EXPECT_EQ(qb->counters().dropped_no_recv, 1u);
  t.b.post_recv(qb, 9, 0, 40 + 50);  // too short for 40 + 100
  ASSERT_EQ(t.a.dev->post_send(qa, wr), 0);
  t.run();
  Wc wc;
  ASSERT_EQ(t.b.rcq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.status, WcStatus::LocLenErr);
  EXPECT_EQ(qb->state(), QpState::Rts);
  // A datagram larger than the link carries is refused at post time; so is one with no AH.
  std::vector<uint8_t> big(16384);
  Mr* bm = t.a.dev->reg_mr(t.a.pd, big.data(), big.size(), kLocalWrite);
  Sge bs{reinterpret_cast<uintptr_t>(big.data()), uint32_t(big.size()), bm->lkey};
  wr.sg_list = &bs;
  EXPECT_EQ(t.a.dev->post_send(qa, wr), EINVAL);
  wr.sg_list = &s;
  wr.ah = nullptr;
  EXPECT_EQ(t.a.dev->post_send(qa, wr), EINVAL);
  wr.ah = ah;
  wr.opcode = WrOpcode::RdmaWrite;
  EXPECT_EQ(t.a.dev->post_send(qa, wr), EINVAL) << "UD carries SENDs only";
}

TEST(Ud, Ipv6GrhIsTheIpv6Header) {
  Two t;
  Qp* qa = t.a.qp(QpType::UD);
  Qp* qb = t.b.qp(QpType::UD);
  ud_up(*t.a.dev, qa, 5);
  ud_up(*t.b.dev, qb, 5);
  AddressVector av;
  av.dgid = t.b.dev->config().gids[1];
  av.dmac = t.b.dev->config().mac;
  av.sgid_index = 1;
  av.hop_limit = 1;
  av.traffic_class = 0x28;
  Ah* ah = t.a.dev->create_ah(t.a.pd, av);
  ASSERT_NE(ah, nullptr);
  av.sgid_index = 0;  // an IPv4 source for an IPv6 destination
  EXPECT_EQ(t.a.dev->create_ah(t.a.pd, av), nullptr);
  t.b.post_recv(qb, 1, 0, 40 + 64);
  Sge s{t.a.addr(), 64, t.a.mr->lkey};
  SendWr wr = ud_wr(&s, ah, qb->qpn(), 5);
  ASSERT_EQ(t.a.dev->post_send(qa, wr), 0);
  t.run();
  Wc wc;
  ASSERT_EQ(t.b.rcq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(wc.byte_len, 104u);
  EXPECT_EQ(t.b.mem[0] >> 4, 6) << "IPv6 version";
  EXPECT_EQ(t.b.mem[7], 1) << "hop limit";
  EXPECT_EQ(std::memcmp(&t.b.mem[8], t.a.dev->config().gids[1].data(), 16), 0) << "source GID";
  EXPECT_EQ(std::memcmp(&t.b.mem[24], t.b.dev->config().gids[1].data(), 16), 0) << "destination GID";
}

// An application may destroy an address handle as soon as it has posted with it (mckey
// destroys its AH before its QP, sends still queued): each WQE keeps its own copy, as rxe's
// does. A new AH made in its place (another address) changes nothing for them.
TEST(Ud, TheAhMayGoBeforeItsDatagrams) {
  Two t;
  Qp* qa = t.a.qp(QpType::UD);
  Qp* qb = t.b.qp(QpType::UD);
  ud_up(*t.a.dev, qa, 5);
  ud_up(*t.b.dev, qb, 5);
  Ah* ah = ah_to(t.a, t.b, 0);
  ASSERT_NE(ah, nullptr);
  for (uint64_t i = 0; i < 3; ++i) t.b.post_recv(qb, i, i * 256, 40 + 64);
  Sge s{t.a.addr(), 64, t.a.mr->lkey};
  SendWr wr = ud_wr(&s, ah, qb->qpn(), 5);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(t.a.dev->post_send(qa, wr), 0);
  ASSERT_EQ(t.a.dev->destroy_ah(ah), 0);
  AddressVector other;
  other.dgid = v4gid(198, 18, 0, 99);
  other.dmac = {0x02, 0, 0, 0, 0, 99};
  ASSERT_NE(t.a.dev->create_ah(t.a.pd, other), nullptr);
  t.run();
  ASSERT_EQ(t.a_sent.size(), 3u);
  for (const proto::Packet& p : t.a_sent) {
    EXPECT_EQ(p.eth_dst, t.b.dev->config().mac);
    EXPECT_EQ(std::memcmp(p.ip_dst.data(), t.b.dev->config().gids[0].data() + 12, 4), 0);
  }
  Wc wc[3];
  EXPECT_EQ(t.b.rcq->poll(wc, 3), 3u);
}

TEST(Ud, DatagramsTakeReceivesFromASharedReceiveQueue) {
  Two t;
  Srq* srq = t.b.dev->create_srq(t.b.pd, 16, 1);
  ASSERT_NE(srq, nullptr);
  QpInitAttr ia;
  ia.pd = t.b.pd;
  ia.send_cq = t.b.scq;
  ia.recv_cq = t.b.rcq;
  ia.srq = srq;
  ia.qp_type = QpType::UD;
  ia.cap.max_send_wr = 8;
  Qp* b1 = t.b.dev->create_qp(ia);
  Qp* b2 = t.b.dev->create_qp(ia);
  Qp* qa = t.a.qp(QpType::UD);
  ASSERT_NE(b1, nullptr);
  ASSERT_NE(b2, nullptr);
  ud_up(*t.a.dev, qa, 1);
  ud_up(*t.b.dev, b1, 1);
  ud_up(*t.b.dev, b2, 1);
  for (uint64_t i = 0; i < 2; ++i) {
    Sge rs{t.b.addr(i * 1024), 1024, t.b.mr->lkey};
    RecvWr r{50 + i, &rs, 1};
    ASSERT_EQ(t.b.dev->post_srq_recv(srq, r), 0);
  }
  Ah* ah = ah_to(t.a, t.b, 0);
  Sge s{t.a.addr(), 32, t.a.mr->lkey};
  for (Qp* dst : {b2, b1}) {
    SendWr w = ud_wr(&s, ah, dst->qpn(), 1);
    ASSERT_EQ(t.a.dev->post_send(qa, w), 0);
  }
  t.run();
  Wc wc[2];
  ASSERT_EQ(t.b.rcq->poll(wc, 2), 2u);
  EXPECT_EQ(wc[0].wr_id, 50u);
  EXPECT_EQ(wc[0].qp_num, b2->qpn());
  EXPECT_EQ(wc[1].wr_id, 51u);
  EXPECT_EQ(wc[1].qp_num, b1->qpn());
  EXPECT_EQ(srq->rq().size(), 0u);
}

// ---- UC ---------------------------------------------------------------------------------------

TEST(Uc, SendAndWriteWithImmDeliverAndALostPacketLosesOnlyItsMessage) {
  Two t;
  Qp* qa = t.a.qp(QpType::UC);
  Qp* qb = t.b.qp(QpType::UC);
  ASSERT_NE(qa, nullptr);
  connect(*t.a.dev, qa, *t.b.dev, qb, 0, 0);
  connect(*t.b.dev, qb, *t.a.dev, qa, 0, 0);
  // Drop A's 2nd frame: the middle packet of the first 3-packet SEND.
  int n = 0;
  t.wire.a().filter = [&](const uint8_t*, uint32_t) { return ++n != 2; };
  t.b.post_recv(qb, 100, 0, 8192);
  t.b.post_recv(qb, 101, 16384, 8192);
  for (int i = 0; i < 3000; ++i) t.a.mem[i] = uint8_t(i), t.a.mem[4096 + i] = uint8_t(i * 3);
  Sge s1{t.a.addr(), 3000, t.a.mr->lkey}, s2{t.a.addr(4096), 3000, t.a.mr->lkey};
  SendWr w1 = signaled_wr(1, &s1);
  SendWr w2 = w1;
  w2.wr_id = 2;
  w2.sg_list = &s2;
  ASSERT_EQ(t.a.dev->post_send(qa, w1), 0);
  ASSERT_EQ(t.a.dev->post_send(qa, w2), 0);
  t.run();
  Wc wc[4];
  ASSERT_EQ(t.a.scq->poll(wc, 4), 2u) << "UC completes a WR once it is sent";
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[1].wr_id, 2u);
  ASSERT_EQ(t.b.rcq->poll(wc, 4), 1u) << "the first message is lost, the second arrives";
  EXPECT_EQ(wc[0].wr_id, 100u) << "the receive WQE the lost message had started is reused";
  EXPECT_EQ(wc[0].byte_len, 3000u);
  EXPECT_EQ(std::memcmp(&t.b.mem[0], &t.a.mem[4096], 3000), 0);
  EXPECT_EQ(qb->counters().dropped_messages, 1u);
  EXPECT_EQ(qb->state(), QpState::Rts);
  // WRITE with immediate: the bytes land, a receive is consumed; no ACK ever comes back.
  t.wire.a().filter = nullptr;
  SendWr w3 = w1;
  w3.wr_id = 3;
  w3.opcode = WrOpcode::RdmaWriteWithImm;
  w3.remote_addr = t.b.addr(32768);
  w3.rkey = t.b.mr->rkey;
  w3.imm_data = 42;
  ASSERT_EQ(t.a.dev->post_send(qa, w3), 0);
  t.run();
  ASSERT_EQ(t.b.rcq->poll(wc, 4), 1u);
  EXPECT_EQ(wc[0].wr_id, 101u);
  EXPECT_EQ(wc[0].opcode, WcOpcode::RecvRdmaWithImm);
  EXPECT_EQ(wc[0].imm_data, 42u);
  EXPECT_EQ(std::memcmp(&t.b.mem[32768], &t.a.mem[0], 3000), 0);
  for (const proto::Packet& p : t.a_sent) {
    EXPECT_EQ(p.info().transport, proto::Transport::UC);
    EXPECT_FALSE(p.ack_req);
  }
  EXPECT_EQ(qb->counters().acks_sent, 0u);
  SendWr rd = w1;
  rd.opcode = WrOpcode::RdmaRead;
  EXPECT_EQ(t.a.dev->post_send(qa, rd), EINVAL) << "UC has no READ";
}

TEST(Uc, AMessageStalledForTransmitBuffersIsNeverResent) {
  FakeWire wire{6, 9216, 5};  // room for 6 frames in flight: a 20-packet message waits for buffers
  Node a{wire.a(), wire.clock(), 10}, b{wire.b(), wire.clock(), 11};
  Qp* qa = a.qp(QpType::UC);
  Qp* qb = b.qp(QpType::UC);
  connect(*a.dev, qa, *b.dev, qb, 0, 0, Mtu::M1024);
  connect(*b.dev, qb, *a.dev, qa, 0, 0, Mtu::M1024);
  b.post_recv(qb, 1, 0, 32768);
  Sge s{a.addr(), 20 * 1024, a.mr->lkey};
  SendWr w = signaled_wr(9, &s);
  ASSERT_EQ(a.dev->post_send(qa, w), 0);
  for (int i = 0; i < 200; ++i) {  // 100 ms steps: far past the local ACK timeout (67 ms)
    a.dev->progress();
    wire.clock().advance(100'000'000);
    b.dev->progress();
  }
  Wc wc;
  ASSERT_EQ(a.scq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.status, WcStatus::Success);
  ASSERT_EQ(b.rcq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.byte_len, 20u * 1024);
  EXPECT_EQ(qa->counters().retransmitted, 0u) << "UC has no retransmission";
  EXPECT_EQ(qa->counters().timeouts, 0u);
  EXPECT_EQ(qa->counters().sent_pkts, 20u);
}

// ---- Loopback -----------------------------------------------------------------------------------

TEST(Loopback, TwoQpsOfOneDeviceTalkWithoutTheWire) {
  Two t;
  Qp* q1 = t.a.qp(QpType::RC);
  Qp* q2 = t.a.qp(QpType::RC);
  connect(*t.a.dev, q1, *t.a.dev, q2, 0, 0);
  connect(*t.a.dev, q2, *t.a.dev, q1, 0, 0);
  for (int i = 0; i < 5000; ++i) t.a.mem[i] = uint8_t(i * 11);
  Sge s{t.a.addr(), 5000, t.a.mr->lkey};
  SendWr w = signaled_wr(1, &s, WrOpcode::RdmaWrite);
  w.remote_addr = t.a.addr(20000);
  w.rkey = t.a.mr->rkey;
  ASSERT_EQ(t.a.dev->post_send(q1, w), 0);
  Sge r{t.a.addr(40000), 5000, t.a.mr->lkey};
  SendWr rd = w;
  rd.wr_id = 2;
  rd.opcode = WrOpcode::RdmaRead;
  rd.sg_list = &r;
  rd.remote_addr = t.a.addr(20000);
  ASSERT_EQ(t.a.dev->post_send(q1, rd), 0);
  t.run();
  Wc wc[2];
  ASSERT_EQ(t.a.scq->poll(wc, 2), 2u) << q1->describe() << "\n" << q2->describe();
  EXPECT_EQ(wc[0].status, WcStatus::Success);
  EXPECT_EQ(wc[1].status, WcStatus::Success);
  EXPECT_EQ(std::memcmp(&t.a.mem[20000], &t.a.mem[0], 5000), 0);
  EXPECT_EQ(std::memcmp(&t.a.mem[40000], &t.a.mem[0], 5000), 0);
  EXPECT_TRUE(t.a_sent.empty()) << "nothing went on the wire";
  EXPECT_GT(q1->counters().loopback, 0u);
}

TEST(Loopback, UdToTheDevicesOwnAddress) {
  Two t;
  Qp* q1 = t.a.qp(QpType::UD);
  Qp* q2 = t.a.qp(QpType::UD);
  ud_up(*t.a.dev, q1, 9);
  ud_up(*t.a.dev, q2, 9);
  AddressVector av;
  av.dgid = t.a.dev->config().gids[0];  // no MAC: the engine knows it is its own
  Ah* ah = t.a.dev->create_ah(t.a.pd, av);
  ASSERT_NE(ah, nullptr);
  t.a.post_recv(q2, 5, 30000, 40 + 16);
  Sge s{t.a.addr(), 16, t.a.mr->lkey};
  SendWr w = ud_wr(&s, ah, q2->qpn(), 9);
  ASSERT_EQ(t.a.dev->post_send(q1, w), 0);
  t.run();
  Wc wc;
  ASSERT_EQ(t.a.rcq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.src_qp, q1->qpn());
  EXPECT_TRUE(t.a_sent.empty());
}

// ---- Multicast (UD) -----------------------------------------------------------------------------

proto::Ip6 group4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) { return v4gid(a, b, c, d); }
proto::Ip6 group6() {
  proto::Ip6 g{};
  g[0] = 0xff, g[1] = 0x0e, g[13] = 0x01, g[15] = 0x02;  // ff0e::1:2 (global scope)
  return g;
}

// A datagram to group 239.1.2.3 from a QP of A: on the wire to QP 0xFFFFFF, to the group's IP
// address and MAC (01:00:5e + the low 23 bits); every QP of B attached to the group receives
// it (bytes and completion), B's QP that is not attached does not, and A's own attached QP
// gets its copy without the wire.
TEST(Multicast, AGroupDatagramReachesEveryAttachedQpHereAndThere) {
  Two t;
  const proto::Ip6 g = group4(239, 129, 2, 3);  // MAC keeps the low 23 bits: 01:00:5e:01:02:03
  Qp* qa = t.a.qp(QpType::UD);
  Qp* qb1 = t.b.qp(QpType::UD);
  Qp* qb2 = t.b.qp(QpType::UD);
  Qp* qb3 = t.b.qp(QpType::UD);
  for (Qp* q : {qb1, qb2, qb3}) ud_up(*t.b.dev, q, 0x01234567);
  ud_up(*t.a.dev, qa, 0x01234567);
  ASSERT_EQ(t.a.dev->attach_mcast(qa, g), 0);
  ASSERT_EQ(t.b.dev->attach_mcast(qb1, g), 0);
  ASSERT_EQ(t.b.dev->attach_mcast(qb2, g), 0);
  AddressVector av;
  av.dgid = g;
  Ah* ah = t.a.dev->create_ah(t.a.pd, av);
  ASSERT_NE(ah, nullptr);
  const proto::Mac mac{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03};
  EXPECT_EQ(ah->av.dmac, mac) << "the group's MAC, no address resolution";
  t.b.post_recv(qb1, 1, 0, 40 + 64);
  t.b.post_recv(qb2, 2, 4096, 40 + 64);
  t.b.post_recv(qb3, 3, 8192, 40 + 64);
  t.a.post_recv(qa, 4, 0, 40 + 64);
  for (int i = 0; i < 64; ++i) t.a.mem[16384 + i] = uint8_t(i + 1);
  Sge s{t.a.addr(16384), 64, t.a.mr->lkey};
  SendWr w = ud_wr(&s, ah, proto::kMulticastQpn, 0x01234567, WrOpcode::SendWithImm);
  w.imm_data = 0xC0FFEE;
  w.send_flags = kSendSignaled;
  ASSERT_EQ(t.a.dev->post_send(qa, w), 0);
  t.run();
  ASSERT_EQ(t.a_sent.size(), 1u) << "one frame on the wire; the sender's copy went round inside";
  const proto::Packet& p = t.a_sent[0];
  EXPECT_EQ(p.eth_dst, mac);
  EXPECT_EQ(p.ip_version, 4);
  EXPECT_EQ(std::memcmp(p.ip_dst.data(), g.data() + 12, 4), 0);
  EXPECT_EQ(p.dest_qp, 0xFFFFFFu);
  EXPECT_EQ(p.opcode, op::kUd | op::kSendOnlyImm);
  EXPECT_EQ(p.deth.src_qp, qa->qpn());
  EXPECT_EQ(p.deth.qkey, 0x01234567u);
  Wc wc;
  ASSERT_EQ(t.a.scq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.status, WcStatus::Success);
  for (auto [q, off, id] : {std::tuple{qb1, 0, 1u}, std::tuple{qb2, 4096, 2u}}) {
    ASSERT_EQ(t.b.rcq->poll(&wc, 1), 1u);
    EXPECT_EQ(wc.wr_id, id);
    EXPECT_EQ(wc.status, WcStatus::Success);
    EXPECT_EQ(wc.qp_num, q->qpn());
    EXPECT_EQ(wc.src_qp, qa->qpn());
    EXPECT_EQ(wc.byte_len, 40u + 64u);
    EXPECT_EQ(wc.imm_data, 0xC0FFEEu);
    EXPECT_EQ(std::memcmp(&t.b.mem[off + 40], &t.a.mem[16384], 64), 0);
    EXPECT_EQ(std::memcmp(&t.b.mem[off + 20 + 16], g.data() + 12, 4), 0) << "the GRH's destination: the group";
  }
  EXPECT_EQ(t.b.rcq->poll(&wc, 1), 0u) << "qb3 is not attached";
  ASSERT_EQ(t.a.rcq->poll(&wc, 1), 1u) << "the sender's own attached QP";
  EXPECT_EQ(wc.qp_num, qa->qpn());
  EXPECT_EQ(std::memcmp(&t.a.mem[40], &t.a.mem[16384], 64), 0);
  const Counters cb = t.b.dev->counters();
  EXPECT_EQ(cb.mcast_rcvd, 2u);
  EXPECT_EQ(t.a.dev->counters().mcast_sent, 1u);
}

// An IPv6 group: the frame goes to 33:33 and the group's low 32 bits, with the group as the
// IPv6 destination, and is delivered.
TEST(Multicast, AnIpv6GroupGoesTo3333AndItsLow32Bits) {
  Two t;
  const proto::Ip6 g = group6();
  Qp* qa = t.a.qp(QpType::UD);
  Qp* qb = t.b.qp(QpType::UD);
  ud_up(*t.a.dev, qa, 7);
  ud_up(*t.b.dev, qb, 7);
  ASSERT_EQ(t.b.dev->attach_mcast(qb, g), 0);
  AddressVector av;
  av.dgid = g;
  av.sgid_index = 1;  // the IPv6 link-local GID
  Ah* ah = t.a.dev->create_ah(t.a.pd, av);
  ASSERT_NE(ah, nullptr);
  t.b.post_recv(qb, 9, 0, 40 + 32);
  Sge s{t.a.addr(16384), 32, t.a.mr->lkey};
  SendWr w = ud_wr(&s, ah, proto::kMulticastQpn, 7);
  ASSERT_EQ(t.a.dev->post_send(qa, w), 0);
  t.run();
  ASSERT_EQ(t.a_sent.size(), 1u);
  const proto::Mac mac{0x33, 0x33, 0x00, 0x01, 0x00, 0x02};
  EXPECT_EQ(t.a_sent[0].eth_dst, mac);
  EXPECT_EQ(t.a_sent[0].ip_version, 6);
  EXPECT_EQ(t.a_sent[0].ip_dst, g);
  Wc wc;
  ASSERT_EQ(t.b.rcq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(std::memcmp(&t.b.mem[24], g.data(), 16), 0) << "the GRH is the IPv6 header: its destination";
}

// ibv_attach_mcast's rules as rxe has them: UD QPs and multicast GIDs only (EINVAL), twice is
// once, detaching what is not attached is EINVAL, the limits give ENOMEM, and a destroyed QP
// leaves its groups. After the last member leaves, the group's datagrams are counted drops.
TEST(Multicast, AttachRulesLimitsAndLeaving) {
  Two t;
  const proto::Ip6 g = group4(224, 0, 1, 9);
  Qp* rc = t.b.qp(QpType::RC);
  Qp* ud = t.b.qp(QpType::UD);
  ud_up(*t.b.dev, ud, 5);
  EXPECT_EQ(t.b.dev->attach_mcast(rc, g), EINVAL) << "an RC QP";
  EXPECT_EQ(t.b.dev->attach_mcast(ud, v4gid(198, 18, 0, 1)), EINVAL) << "a unicast GID";
  EXPECT_EQ(t.b.dev->attach_mcast(ud, group4(240, 0, 0, 1)), EINVAL) << "class E is not multicast";
  EXPECT_EQ(t.b.dev->detach_mcast(ud, g), EINVAL) << "not attached";
  ASSERT_EQ(t.b.dev->attach_mcast(ud, g), 0);
  ASSERT_EQ(t.b.dev->attach_mcast(ud, g), 0) << "twice is one attachment";
  EXPECT_EQ(t.b.dev->mcast_groups(), 1u);
  // One delivery, not two.
  Qp* qa = t.a.qp(QpType::UD);
  ud_up(*t.a.dev, qa, 5);
  AddressVector av;
  av.dgid = g;
  Ah* ah = t.a.dev->create_ah(t.a.pd, av);
  t.b.post_recv(ud, 1, 0, 100);
  t.b.post_recv(ud, 2, 4096, 100);
  Sge s{t.a.addr(16384), 8, t.a.mr->lkey};
  SendWr w = ud_wr(&s, ah, proto::kMulticastQpn, 5);
  ASSERT_EQ(t.a.dev->post_send(qa, w), 0);
  t.run();
  Wc wc[2];
  EXPECT_EQ(t.b.rcq->poll(wc, 2), 1u);
  // Detached: the next datagram is counted and dropped.
  ASSERT_EQ(t.b.dev->detach_mcast(ud, g), 0);
  EXPECT_EQ(t.b.dev->mcast_groups(), 0u);
  ASSERT_EQ(t.a.dev->post_send(qa, w), 0);
  t.run();
  EXPECT_EQ(t.b.rcq->poll(wc, 2), 0u);
  EXPECT_EQ(t.b.dev->counters().dropped_mcast, 1u);
  // max_mcast_qp_attach QPs in one group, then ENOMEM.
  std::vector<Qp*> qs;
  for (uint32_t i = 0; i < param::kMaxMcastQpAttach; ++i) {
    qs.push_back(t.b.qp(QpType::UD));
    ASSERT_EQ(t.b.dev->attach_mcast(qs.back(), g), 0) << i;
  }
  Qp* extra = t.b.qp(QpType::UD);
  EXPECT_EQ(t.b.dev->attach_mcast(extra, g), ENOMEM);
  // max_mcast_grp groups, then ENOMEM.
  for (uint32_t i = 1; i < param::kMaxMcastGrp; ++i)
    ASSERT_EQ(t.b.dev->attach_mcast(extra, group4(239, 0, uint8_t(i >> 8), uint8_t(i))), 0) << i;
  EXPECT_EQ(t.b.dev->mcast_groups(), size_t(param::kMaxMcastGrp));
  EXPECT_EQ(t.b.dev->attach_mcast(extra, group4(239, 1, 0, 0)), ENOMEM);
  // Destroying QPs takes them out of their groups.
  ASSERT_EQ(t.b.dev->destroy_qp(extra), 0);
  EXPECT_EQ(t.b.dev->mcast_groups(), 1u);
  for (Qp* q : qs) ASSERT_EQ(t.b.dev->destroy_qp(q), 0);
  EXPECT_EQ(t.b.dev->mcast_groups(), 0u);
}

// The link hears of the device's membership of a group: joined with its first member, left
// after its last (detached or destroyed), once each, whatever the number of QPs in between; a
// link that refuses the join (a kernel out of memberships) makes ibv_attach_mcast fail with its
// errno, and the group is not joined.
TEST(Multicast, TheLinkJoinsWithTheFirstMemberAndLeavesAfterTheLast) {
  Two t;
  const proto::Ip6 g = group4(239, 18, 0, 5);
  auto& calls = t.wire.b().group_calls;
  Qp* q1 = t.b.qp(QpType::UD);
  Qp* q2 = t.b.qp(QpType::UD);
  ASSERT_EQ(t.b.dev->attach_mcast(q1, g), 0);
  ASSERT_EQ(t.b.dev->attach_mcast(q2, g), 0);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].first, g);
  EXPECT_TRUE(calls[0].second);
  ASSERT_EQ(t.b.dev->detach_mcast(q1, g), 0);
  EXPECT_EQ(calls.size(), 1u) << "q2 is still a member";
  ASSERT_EQ(t.b.dev->destroy_qp(q2), 0);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_FALSE(calls[1].second) << "left with the last member";
  t.wire.b().group_error = ENOBUFS;
  EXPECT_EQ(t.b.dev->attach_mcast(q1, g), ENOBUFS);
  EXPECT_EQ(t.b.dev->mcast_groups(), 0u);
  t.wire.b().group_error = 0;
  EXPECT_EQ(t.b.dev->attach_mcast(q1, g), 0);
  EXPECT_EQ(t.b.dev->mcast_groups(), 1u);
}

// Forged or stray frames to QP 0xFFFFFF: to a unicast MAC, to a unicast address, of RC, with
// the wrong Q_Key (per member), to a member in RESET: each a counted drop, nothing delivered.
TEST(Multicast, StrayGroupFramesAreCountedDrops) {
  Two t;
  const proto::Ip6 g = group4(239, 1, 1, 1);
  Qp* qb = t.b.qp(QpType::UD);
  ud_up(*t.b.dev, qb, 5);
  ASSERT_EQ(t.b.dev->attach_mcast(qb, g), 0);
  Qp* idle = t.b.qp(QpType::UD);  // attached in RESET
  ASSERT_EQ(t.b.dev->attach_mcast(idle, g), 0);
  t.b.post_recv(qb, 1, 0, 200);
  proto::Packet p;
  p.eth_src = t.a.dev->config().mac;
  p.eth_dst = proto::multicast_mac(g);
  p.ip_version = 4;
  std::memcpy(p.ip_src.data(), t.a.dev->config().gids[0].data() + 12, 4);
  std::memcpy(p.ip_dst.data(), g.data() + 12, 4);
  p.opcode = op::kUd | op::kSendOnly;
  p.dest_qp = proto::kMulticastQpn;
  p.pkey = 0xFFFF;
  p.deth.qkey = 5;
  p.deth.src_qp = 0x42;
  uint8_t data[16] = {1, 2, 3};
  p.payload = {data, sizeof data};
  auto send = [&](const proto::Packet& f) {
    inject(t.wire.b(), f);
    t.run(4);
  };
  proto::Packet bad = p;
  bad.eth_dst = t.b.dev->config().mac;
  send(bad);  // a unicast MAC
  bad = p;
  std::memcpy(bad.ip_dst.data(), t.b.dev->config().gids[0].data() + 12, 4);
  send(bad);  // the group's MAC, a unicast address
  bad = p;
  bad.opcode = op::kSendOnly;  // RC: the class bits are 0
  send(bad);  // RC to QP 0xFFFFFF
  Counters c = t.b.dev->counters();
  EXPECT_EQ(c.dropped_not_for_us, 3u);
  bad = p;
  bad.deth.qkey = 6;
  send(bad);  // the wrong Q_Key: qb drops it, idle (RESET) too
  c = t.b.dev->counters();
  EXPECT_EQ(c.dropped_qkey, 1u);
  EXPECT_EQ(c.dropped_bad_state, 1u);
  Wc wc;
  EXPECT_EQ(t.b.rcq->poll(&wc, 1), 0u);
  send(p);  // the good one
  ASSERT_EQ(t.b.rcq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.src_qp, 0x42u);
  EXPECT_EQ(t.b.dev->counters().dropped_bad_state, 2u) << "the member in RESET drops each";
}

// ---- Per-QP source GIDs ----------------------------------------------------------------------------

TEST(Gid, OneQpOverIpv4AndOneOverIpv6ToTheSamePeer) {
  Two t;
  Qp* a4 = t.a.qp(QpType::RC);
  Qp* b4 = t.b.qp(QpType::RC);
  Qp* a6 = t.a.qp(QpType::RC);
  Qp* b6 = t.b.qp(QpType::RC);
  connect(*t.a.dev, a4, *t.b.dev, b4, 0, 0);
  connect(*t.b.dev, b4, *t.a.dev, a4, 0, 0);
  connect(*t.a.dev, a6, *t.b.dev, b6, 1, 1);
  connect(*t.b.dev, b6, *t.a.dev, a6, 1, 1);
  for (int i = 0; i < 100; ++i) t.a.mem[i] = uint8_t(i + 1);
  Sge s{t.a.addr(), 100, t.a.mr->lkey};
  SendWr w;
  w.opcode = WrOpcode::RdmaWrite;
  w.send_flags = kSendSignaled;
  w.sg_list = &s;
  w.num_sge = 1;
  w.rkey = t.b.mr->rkey;
  w.wr_id = 4;
  w.remote_addr = t.b.addr(1000);
  ASSERT_EQ(t.a.dev->post_send(a4, w), 0);
  w.wr_id = 6;
  w.remote_addr = t.b.addr(2000);
  ASSERT_EQ(t.a.dev->post_send(a6, w), 0);
  t.run();
  Wc wc[2];
  ASSERT_EQ(t.a.scq->poll(wc, 2), 2u);
  EXPECT_EQ(wc[0].status, WcStatus::Success);
  EXPECT_EQ(wc[1].status, WcStatus::Success);
  EXPECT_EQ(std::memcmp(&t.b.mem[1000], &t.a.mem[0], 100), 0);
  EXPECT_EQ(std::memcmp(&t.b.mem[2000], &t.a.mem[0], 100), 0);
  int v4 = 0, v6 = 0;
  for (const proto::Packet& p : t.a_sent) {
    if (p.dest_qp == b4->qpn()) {
      EXPECT_EQ(p.ip_version, 4);
      ++v4;
    } else if (p.dest_qp == b6->qpn()) {
      EXPECT_EQ(p.ip_version, 6);
      EXPECT_EQ(p.ip_src, t.a.dev->config().gids[1]);
      ++v6;
    }
  }
  EXPECT_EQ(v4, 1);
  EXPECT_EQ(v6, 1);
}

TEST(Gid, AnSgidNotInTheTableOrOfTheOtherFamilyIsEinval) {
  Two t;
  Qp* q = t.a.qp(QpType::RC);
  QpAttr a;
  a.qp_state = QpState::Init;
  ASSERT_EQ(t.a.dev->modify_qp(q, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags), 0);
  a.qp_state = QpState::Rtr;
  a.dest_qp_num = 5;
  a.max_dest_rd_atomic = 1;
  a.ah_attr.dgid = t.b.dev->config().gids[1];  // IPv6
  const uint32_t m = kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic |
                     kAttrMinRnrTimer;
  a.ah_attr.sgid_index = 0;  // IPv4 source
  EXPECT_EQ(t.a.dev->modify_qp(q, a, m), EINVAL);
  a.ah_attr.sgid_index = 7;  // not in the table
  EXPECT_EQ(t.a.dev->modify_qp(q, a, m), EINVAL);
  a.ah_attr.sgid_index = 1;
  EXPECT_EQ(t.a.dev->modify_qp(q, a, m), 0);
}

}  // namespace
}  // namespace uroce::test
