// Scale (issue 30): the device's limits on QPs and CQs, objects taken out in any order, and
// progress() visiting only the QPs that have work (Device::kick): a QP leaves the active list
// when it has nothing left to do or is only waiting (parked in the timer heap), comes back with
// a verb, a frame or its timer, and its timers fire as before.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include "tests/support/harness.hpp"
#include "tests/support/many_pairs.hpp"

namespace uroce::test {
namespace {

Device::Config small_config(uint32_t max_qp, uint32_t max_cq) {
  Device::Config c;
  c.mac = {0x02, 0, 0, 0, 0, 0x0a};
  c.gid = v4gid(198, 18, 0, 10);
  c.seed = 3;
  c.max_qp = max_qp;
  c.max_cq = max_cq;
  return c;
}

QpInitAttr rc_attr(Pd* pd, Cq* cq, uint32_t depth = 4) {
  QpInitAttr ia;
  ia.pd = pd;
  ia.send_cq = ia.recv_cq = cq;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = depth;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  return ia;
}

TEST(Limits, TheDeviceReportsAConnectXsQpCountAndTwoCqsPerQp) {
  EXPECT_EQ(param::kMaxQp, 262144u);
  EXPECT_EQ(param::kMaxCq, 2 * param::kMaxQp);
  EXPECT_EQ(param::kMaxCqe, 4194303u);
  Device::Config c;
  EXPECT_EQ(c.max_qp, param::kMaxQp);
  EXPECT_EQ(c.max_cq, param::kMaxCq);
  EXPECT_EQ(c.max_cqe, param::kMaxCqe);
  // perftest's ib_write_bw -q 1024 asks one CQ for 128 x 1024 completions.
  FakeWire wire(64, 9216, 1);
  Device dev(wire.a(), wire.clock(), small_config(2, 2));
  EXPECT_NE(dev.create_cq(128 * 1024), nullptr);
  EXPECT_EQ(dev.create_cq(param::kMaxCqe + 1), nullptr);
}

TEST(Limits, MaxQpAndMaxCqAreEnforcedAndFreedSlotsAreUsedAgain) {
  FakeWire wire(64, 9216, 1);
  Device dev(wire.a(), wire.clock(), small_config(3, 2));
  Pd* pd = dev.alloc_pd();
  Cq* c1 = dev.create_cq(8);
  Cq* c2 = dev.create_cq(8);
  ASSERT_NE(c1, nullptr);
  ASSERT_NE(c2, nullptr);
  EXPECT_EQ(dev.create_cq(8), nullptr) << "max_cq 2";
  std::vector<Qp*> q;
  for (int i = 0; i < 3; ++i) q.push_back(dev.create_qp(rc_attr(pd, i == 2 ? c2 : c1)));
  for (Qp* x : q) ASSERT_NE(x, nullptr);
  EXPECT_EQ(dev.create_qp(rc_attr(pd, c1)), nullptr) << "max_qp 3";
  // A CQ in use cannot go; one whose QPs are gone can, and its place is free again.
  EXPECT_EQ(dev.destroy_cq(c2), EBUSY);
  EXPECT_EQ(dev.destroy_qp(q[0]), 0);  // the first: the last one moves into its place
  EXPECT_EQ(dev.destroy_qp(q[2]), 0);
  EXPECT_EQ(dev.destroy_cq(c2), 0);
  EXPECT_EQ(dev.destroy_cq(c1), EBUSY);
  // The moved QP is still found by its number and can be destroyed.
  EXPECT_EQ(dev.qp_by_num(q[1]->qpn()), q[1]);
  Qp* again = dev.create_qp(rc_attr(pd, c1));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(dev.qps().size(), 2u);
  EXPECT_EQ(dev.destroy_qp(q[1]), 0);
  EXPECT_EQ(dev.destroy_qp(again), 0);
  EXPECT_EQ(dev.destroy_cq(c1), 0);
  EXPECT_NE(dev.create_cq(8), nullptr);
  EXPECT_TRUE(dev.qps().empty());
}

// max_ah, reported by the shim as ibv_query_device's max_ah: enforced with ENOMEM, a freed one
// made again.
TEST(Limits, MaxAhIsEnforced) {
  FakeWire wire(64, 9216, 1);
  Device::Config cfg = small_config(8, 8);
  cfg.gids = {cfg.gid};
  Device dev(wire.a(), wire.clock(), cfg);
  Pd* pd = dev.alloc_pd();
  AddressVector av;
  av.dgid = v4gid(198, 18, 0, 20);
  av.sgid_index = 0;
  std::vector<Ah*> ahs;
  for (uint32_t i = 0; i < param::kMaxAh; ++i) {
    Ah* ah = dev.create_ah(pd, av);
    ASSERT_NE(ah, nullptr) << i;
    ahs.push_back(ah);
  }
  errno = 0;
  EXPECT_EQ(dev.create_ah(pd, av), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(dev.destroy_ah(ahs.back()), 0);
  EXPECT_NE(dev.create_ah(pd, av), nullptr);
}

// max_mr and max_mw: rxe's 262,144 each, every one usable, the next refused (ENOMEM for the
// window), a freed one usable again; every key distinct.
TEST(Limits, MaxMrAndMaxMwAreEnforced) {
  FakeWire wire(64, 9216, 1);
  Device dev(wire.a(), wire.clock(), small_config(8, 8));
  Pd* pd = dev.alloc_pd();
  std::vector<uint8_t> m(64);
  std::vector<Mr*> mrs;
  std::set<uint32_t> keys;
  for (uint32_t i = 0; i < param::kMaxMr; ++i) {
    Mr* mr = dev.reg_mr(pd, m.data(), m.size(), kLocalWrite | kRemoteWrite | kMwBind);
    ASSERT_NE(mr, nullptr) << i;
    ASSERT_TRUE(keys.insert(mr->lkey).second && keys.insert(mr->rkey).second) << i;
    mrs.push_back(mr);
  }
  EXPECT_EQ(dev.reg_mr(pd, m.data(), m.size(), kLocalWrite), nullptr);
  ASSERT_EQ(dev.dereg_mr(mrs.back()), 0);
  mrs.back() = dev.reg_mr(pd, m.data(), m.size(), kLocalWrite);
  EXPECT_NE(mrs.back(), nullptr);
  std::vector<Mw*> mws;
  for (uint32_t i = 0; i < param::kMaxMw; ++i) {
    Mw* w = dev.alloc_mw(pd, i % 2 ? 2 : 1);
    ASSERT_NE(w, nullptr) << i;
    mws.push_back(w);
  }
  errno = 0;
  EXPECT_EQ(dev.alloc_mw(pd, 2), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ASSERT_EQ(dev.dealloc_mw(mws.back()), 0);
  EXPECT_NE(dev.alloc_mw(pd, 2), nullptr);
}

// Memory that follows use (issue 30): the responder's READ/atomic slots (max_dest_rd_atomic of
// them) are allocated when the first READ arrives, not at connect; a QP that only carried SENDs
// and WRITEs holds none, and a reset gives them back.
TEST(FirstUse, ResponderSlotsComeWithTheFirstReadAndGoWithReset) {
  PairOptions o;
  o.max_rd_atomic = 8;
  ConnectedPair p(o);
  RecvSide& r = p.b.qp->rx;
  EXPECT_EQ(r.res_n, 8u);
  EXPECT_TRUE(r.res.empty()) << "none at connect";
  fill_pattern(p.a.buf(), 4096, 3);
  Sge s{p.a.addr(), 4096, p.a.mr->lkey};
  SendWr w = wr_to(p.b, 1, WrOpcode::RdmaWrite, &s);
  ASSERT_EQ(p.a.dev->post_send(p.a.qp, w), 0);
  Wc wc;
  ASSERT_TRUE(p.next_wc(p.a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_TRUE(r.res.empty()) << "a WRITE takes no slot";
  EXPECT_EQ(r.res.capacity(), 0u);
  // A READ of what was written, into another part of A's buffer.
  Sge d{p.a.addr() + 8192, 4096, p.a.mr->lkey};
  SendWr rd = wr_to(p.b, 2, WrOpcode::RdmaRead, &d);
  ASSERT_EQ(p.a.dev->post_send(p.a.qp, rd), 0);
  ASSERT_TRUE(p.next_wc(p.a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(std::memcmp(p.a.buf() + 8192, p.a.buf(), 4096), 0);
  EXPECT_EQ(r.res.size(), 8u) << "the first READ made all max_dest_rd_atomic slots";
  QpAttr a;
  a.qp_state = QpState::Reset;
  ASSERT_EQ(p.b.dev->modify_qp(p.b.qp, a, kAttrState), 0);
  EXPECT_TRUE(r.res.empty());
  EXPECT_EQ(r.res.capacity(), 0u) << "given back at reset";
}

// Queues hold storage for param::kQueueFirstSlots entries when created and double it as posts
// need (issue 30: memory follows use). Here the send queue grows twice while WQEs are in flight
// and unacknowledged (every frame of A's first transmission lost): the WQEs moved with their
// SGEs and inline bytes, and the resends after the growth carry the right bytes, in order.
TEST(FirstUse, TheSendQueueGrowsUnderWqesInFlightAndTheirResendsCarryTheirBytes) {
  PairOptions o;
  o.max_send_wr = 4 * param::kQueueFirstSlots;
  o.max_recv_wr = 4 * param::kQueueFirstSlots;
  ConnectedPair p(o);
  const uint32_t n = o.max_send_wr;
  EXPECT_EQ(p.a.qp->tx.sq.capacity(), param::kQueueFirstSlots) << "storage for the first slots only";
  for (uint32_t i = 0; i < n; ++i) {
    Sge r{p.b.addr() + i * 256, 256, p.b.mr->lkey};
    RecvWr rw{i, &r, 1};
    ASSERT_EQ(p.b.dev->post_recv(p.b.qp, rw), 0);
  }
  EXPECT_EQ(p.b.qp->rx.rq.allocated(), n) << "the receive queue grew to its depth";
  // A's frames are lost until every WQE has been posted; the odd ones are inline (their bytes
  // in the send queue's own storage), the even ones gathered from A's buffer at send time.
  bool lose = true;
  uint32_t lost = 0;
  p.link(0).filter = [&](const uint8_t*, uint32_t) { return lose ? (++lost, false) : true; };
  fill_pattern(p.a.buf(), n * 256, 9);
  for (uint32_t i = 0; i < n; ++i) {
    Sge s{p.a.addr() + i * 256, 100 + i, p.a.mr->lkey};
    SendWr w = signaled_wr(1000 + i, &s, WrOpcode::Send);
    if (i % 2) w.send_flags |= kSendInline;
    ASSERT_EQ(p.a.dev->post_send(p.a.qp, w), 0) << i;
    if (i % 2) std::memset(p.a.buf() + i * 256, 0xEE, 100 + i);  // inline: copied at the post
    p.a.dev->progress();  // sent (and lost) before the next post grows the queue
  }
  EXPECT_EQ(p.a.qp->tx.sq.capacity(), n) << "doubled up to max_send_wr";
  Sge s{p.a.addr(), 1, p.a.mr->lkey};
  SendWr extra = signaled_wr(1, &s, WrOpcode::Send);
  EXPECT_EQ(p.a.dev->post_send(p.a.qp, extra), ENOMEM) << "no further than max_send_wr";
  EXPECT_GE(lost, param::kQueueFirstSlots);
  lose = false;
  fill_pattern(p.a.buf(), n * 256, 9);  // the gathered ones' bytes as they were
  for (uint32_t i = 0; i < n; ++i) {
    Wc wc;
    ASSERT_TRUE(p.next_wc(p.b.rcq, wc)) << i << " " << p.a.qp->describe();
    EXPECT_EQ(wc.status, WcStatus::Success);
    EXPECT_EQ(wc.wr_id, i) << "in order";
    EXPECT_EQ(wc.byte_len, 100 + i);
  }
  std::vector<uint8_t> want(n * 256);
  fill_pattern(want.data(), n * 256, 9);
  for (uint32_t i = 0; i < n; ++i)
    EXPECT_EQ(std::memcmp(p.b.buf() + i * 256, want.data() + i * 256, 100 + i), 0) << "message " << i;
  for (uint32_t i = 0; i < n; ++i) {
    Wc wc;
    ASSERT_TRUE(p.next_wc(p.a.scq, wc));
    EXPECT_EQ(wc.wr_id, 1000 + i);
    EXPECT_EQ(wc.status, WcStatus::Success);
  }
  EXPECT_GT(p.a.qp->counters().retransmitted, 0u) << "the lost frames were resent, after the growth";
  // A reset gives the storage back.
  QpAttr a;
  a.qp_state = QpState::Reset;
  ASSERT_EQ(p.a.dev->modify_qp(p.a.qp, a, kAttrState), 0);
  ASSERT_EQ(p.b.dev->modify_qp(p.b.qp, a, kAttrState), 0);
  EXPECT_EQ(p.a.qp->tx.sq.capacity(), param::kQueueFirstSlots);
  EXPECT_EQ(p.b.qp->rx.rq.allocated(), param::kQueueFirstSlots);
}

// A CQ holds storage for the first slots and grows, keeping its completions in order (with
// their times, when it keeps them), up to its depth; then it overflows as before.
TEST(FirstUse, ACqGrowsToItsDepthKeepingItsCompletionsInOrder) {
  Cq cq(3 * param::kQueueFirstSlots);
  EXPECT_EQ(cq.allocated(), param::kQueueFirstSlots);
  EXPECT_EQ(cq.depth(), 3 * param::kQueueFirstSlots);
  uint64_t next_in = 0, next_out = 0;
  auto push = [&] {
    Wc w;
    w.wr_id = next_in++;
    w.byte_len = uint32_t(w.wr_id * 3);
    w.imm_data = uint32_t(w.wr_id + 7);
    w.wc_flags = kWcWithImm;
    return cq.push(w);
  };
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(push());
  Wc w;
  for (int i = 0; i < 3; ++i) {  // the ring's head moves off position 0 before it grows
    ASSERT_EQ(cq.poll(&w, 1), 1u);
    EXPECT_EQ(w.wr_id, next_out++);
  }
  while (cq.size() < cq.depth()) ASSERT_TRUE(push());
  EXPECT_EQ(cq.allocated(), cq.depth());
  EXPECT_FALSE(push()) << "full at its depth";
  EXPECT_TRUE(cq.overflowed());
  while (cq.poll(&w, 1) == 1) {
    EXPECT_EQ(w.wr_id, next_out);
    EXPECT_EQ(w.byte_len, uint32_t(next_out * 3));
    EXPECT_EQ(w.imm_data, uint32_t(next_out + 7));
    EXPECT_EQ(w.wc_flags, uint32_t(kWcWithImm));
    ++next_out;
  }
  EXPECT_EQ(next_out, next_in - 1) << "every completion but the one refused";
}

// Back-pressure (port/param.hpp kTxBacklogHigh: a link with a full transmit backlog lends no
// buffer). An ACK that finds no buffer stays owed and goes out at a later step: it used to be
// dropped, and the requester then resent what had arrived (a tail-loss probe or the QP timer).
TEST(BackPressure, AnAckThatFindsNoTransmitBufferGoesOutLater) {
  PairOptions o;
  ConnectedPair p(o);
  fill_pattern(p.a.buf(), 64, 5);
  Sge s{p.a.addr(), 64, p.a.mr->lkey};
  SendWr w = wr_to(p.b, 7, WrOpcode::RdmaWrite, &s);
  ASSERT_EQ(p.a.dev->post_send(p.a.qp, w), 0);
  p.link(1).refuse_allocs = 3;    // B's first three tries at its ACK find no buffer
  ASSERT_TRUE(p.run_until([&] { return p.link(1).refuse_allocs == 0; })) << "B tried three times";
  EXPECT_EQ(p.b.qp->counters().rcvd_pkts, 1u);
  EXPECT_EQ(p.b.qp->counters().acks_sent, 0u);
  EXPECT_TRUE(p.b.qp->rx.ack_pending) << "still owed";
  Wc wc;
  ASSERT_TRUE(p.next_wc(p.a.scq, wc));
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(std::memcmp(p.b.buf(), p.a.buf(), 64), 0);
  EXPECT_EQ(p.b.qp->counters().acks_sent, 1u) << "one ACK, sent when a buffer came";
  EXPECT_EQ(p.a.qp->counters().retransmitted, 0u) << "nothing resent: the ACK was not lost";
  EXPECT_EQ(p.a.qp->counters().probes, 0u);
}

// A WRITE of 64 bytes on each of A's QPs, to its own place in B's memory.
void post_write_on_each(ManyPairs& m) {
  for (uint32_t i = 0; i < m.qa.size(); ++i) {
    fill_pattern(m.ma.data() + i * 64, 64, i + 1);
    Sge g{uint64_t(uintptr_t(m.ma.data())) + i * 64, 64, m.mra->lkey};
    SendWr w{};
    w.wr_id = i;
    w.opcode = WrOpcode::RdmaWrite;
    w.sg_list = &g;
    w.num_sge = 1;
    w.send_flags = kSendSignaled;
    w.remote_addr = uint64_t(uintptr_t(m.mb.data())) + i * 64;
    w.rkey = m.mrb->rkey;
    ASSERT_EQ(m.a->post_send(m.qa[i], w), 0);
  }
}

uint64_t sent_by(const std::vector<Qp*>& qps) {
  uint64_t n = 0;
  for (const Qp* q : qps) n += q->counters().sent_pkts;
  return n;
}

// A step ends where the link refuses a buffer (issue 30: visiting every other QP, its state
// cold, only slowed the step down, and with it the receive side that frees the buffers); the
// next step serves them all, the one refused included.
TEST(BackPressure, AStepEndsWhereTheLinkRefusesAndTheNextServesEveryQp) {
  ManyPairs m({.pairs = 16, .send_depth = 4});
  ASSERT_EQ(m.error, nullptr) << m.error;
  post_write_on_each(m);
  if (HasFatalFailure()) return;
  m.wire.a().refuse_allocs = 1;
  m.a->progress();
  EXPECT_EQ(m.wire.a().refuse_allocs, 0u);
  EXPECT_EQ(sent_by(m.qa), 0u) << "the first QP was refused: nobody else tried";
  m.a->progress();
  EXPECT_EQ(sent_by(m.qa), 16u) << "every QP's WRITE in the next step";
  uint32_t done = 0;
  ASSERT_TRUE(m.run_until([&] {
    Wc wc;
    while (m.a->poll_cq(m.sa, 1, &wc) == 1) done += wc.status == WcStatus::Success;
    return done == 16;
  }));
  for (uint32_t i = 0; i < 16; ++i) EXPECT_EQ(std::memcmp(m.mb.data() + i * 64, m.ma.data() + i * 64, 64), 0) << "QP " << i;
}

// A link that takes nothing for good (a peer gone behind a full ring): each step visits one QP,
// in turn, so every QP's timer still runs out and every WRITE ends in RETRY_EXC_ERR, none hangs,
// and all at once: within 1 s, where the eight timeouts of 67 ms (timeout 14, retry_cnt 7) take
// 0.54 s. (Before, a QP whose go-back-N resend found no buffer stopped its timer for good. And
// without the rule that a QP refused first in its step goes last, one QP would head every step
// and the others would end one after another, well beyond 1 s.)
TEST(BackPressure, ALinkThatTakesNothingStillEndsEveryQpInRetryExceeded) {
  ManyPairs m({.pairs = 8, .send_depth = 4});
  ASSERT_EQ(m.error, nullptr) << m.error;
  post_write_on_each(m);
  if (HasFatalFailure()) return;
  m.a->progress();  // the WRITEs go out; B never answers (it is not polled)
  ASSERT_EQ(sent_by(m.qa), 8u);
  m.wire.a().refuse_allocs = UINT32_MAX;
  uint32_t failed = 0, other = 0;
  for (uint64_t i = 0; i < 1'000'000 && failed + other < 8; ++i) {  // 1 us a step: 1 s
    m.a->progress();
    m.wire.clock().advance(1000);
    Wc wc;
    while (m.a->poll_cq(m.sa, 1, &wc) == 1) (wc.status == WcStatus::RetryExcErr ? failed : other) += 1;
  }
  EXPECT_EQ(failed, 8u);
  EXPECT_EQ(other, 0u);
}

TEST(ActiveList, AQpLeavesItWhenItsWorkIsDoneAndComesBackForAVerbOrAFrame) {
  PairOptions o;
  ConnectedPair p(o);
  // Connecting (modify_qp) put both QPs on the list; with nothing to do they leave it.
  p.run_until([&] { return false; }, 1'000'000);
  EXPECT_EQ(p.a.dev->active_qps(), 0u);
  EXPECT_EQ(p.b.dev->active_qps(), 0u);
  // A WRITE: the requester's QP is kicked by the post, the responder's by the frame; both are
  // off the list again once the ACK has come.
  fill_pattern(p.a.buf(), 4096, 7);
  Sge s{p.a.addr(), 4096, p.a.mr->lkey};
  SendWr w = wr_to(p.b, 1, WrOpcode::RdmaWrite, &s);
  ASSERT_EQ(p.a.dev->post_send(p.a.qp, w), 0);
  EXPECT_EQ(p.a.dev->active_qps(), 1u);
  Wc wc;
  ASSERT_TRUE(p.next_wc(p.a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(std::memcmp(p.b.buf(), p.a.buf(), 4096), 0);
  p.run_until([&] { return false; }, 1'000'000);
  EXPECT_EQ(p.a.dev->active_qps(), 0u);
  EXPECT_EQ(p.b.dev->active_qps(), 0u);
}

TEST(ActiveList, AQpWaitingForAnAnswerIsParkedAndItsTimerStillFires) {
  PairOptions o;
  o.timeout = 10;   // 4.096 us * 2^10: about 4 ms
  o.retry_cnt = 2;
  ConnectedPair p(o);
  // The wire drops everything from A: the WRITE is never answered. Only A's QP timer can end
  // it, after retry_cnt + 1 timeouts, with RETRY_EXC_ERR. Meanwhile the QP is off the list,
  // parked in the timer heap until its timer is due.
  p.wire.a().filter = [](const uint8_t*, uint32_t) { return false; };
  Sge s{p.a.addr(), 64, p.a.mr->lkey};
  ASSERT_EQ(p.a.dev->post_send(p.a.qp, wr_to(p.b, 9, WrOpcode::RdmaWrite, &s)), 0);
  p.a.dev->progress();  // the WRITE goes (and is lost)
  EXPECT_EQ(p.a.qp->counters().sent_pkts, 1u);
  EXPECT_EQ(p.a.dev->active_qps(), 0u) << "only waiting: parked";
  EXPECT_EQ(p.a.dev->timer_entries(), 1u);
  Wc wc;
  ASSERT_TRUE(p.next_wc(p.a.scq, wc, 1'000'000'000));
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.status, WcStatus::RetryExcErr);
  EXPECT_EQ(p.a.qp->counters().timeouts, 3u);
  EXPECT_EQ(p.b.dev->active_qps(), 0u) << "B never heard of it";
}

// Hostile frames (issue 30's list is reached by any frame naming a QP): a forged request with a
// wrong P_Key, and a forged ACK for nothing sent, each put the named QP on the list for one
// visit; each is a counted drop, nothing is sent, and the QP is off the list again at once.
TEST(ActiveList, AForgedFrameCostsItsQpOneVisitAndNothingMore) {
  ConnectedPair p;
  p.run_until([&] { return false; }, 1'000'000);
  ASSERT_EQ(p.b.dev->active_qps(), 0u);
  const uint64_t sent0 = p.b.qp->counters().sent_pkts;
  proto::Packet bad_pkey = forge(p.a, p.b, proto::op::kSendOnly, p.b.qp->expected_psn());
  bad_pkey.pkey = 0x1234;
  ASSERT_NO_FATAL_FAILURE(inject(p.wire.b(), bad_pkey));
  proto::Packet ghost_ack = forge(p.a, p.b, proto::op::kAck, 0x123456);
  ghost_ack.aeth = {0x1F, 7};
  ASSERT_NO_FATAL_FAILURE(inject(p.wire.b(), ghost_ack));
  p.b.dev->progress();
  EXPECT_EQ(p.b.qp->counters().dropped_pkey, 1u);
  EXPECT_EQ(p.b.qp->counters().ghost_responses, 1u);
  EXPECT_EQ(p.b.dev->active_qps(), 0u) << "visited once, then off the list";
  EXPECT_EQ(p.b.dev->timer_entries(), 0u);
  p.b.dev->progress();
  EXPECT_EQ(p.b.qp->counters().sent_pkts, sent0) << "no answer to either";
  EXPECT_EQ(p.b.qp->state(), QpState::Rts);
}

TEST(ActiveList, IdleQpsAreNotVisited) {
  // 2,000 connected QPs that carry nothing beside one pair that does: the pair's traffic never
  // puts the idle ones on the list.
  PairOptions o;
  ConnectedPair p(o);
  std::vector<Qp*> idle;
  for (int i = 0; i < 1000; ++i) {
    Qp* x = p.a.dev->create_qp(p.a.init_attr(QpType::RC));
    Qp* y = p.a.dev->create_qp(p.a.init_attr(QpType::RC));
    ASSERT_NE(x, nullptr);
    ASSERT_NE(y, nullptr);
    ASSERT_EQ(connect_qp(*p.a.dev, x, *p.a.dev, *y, p.path(1, 2)), 0);
    ASSERT_EQ(connect_qp(*p.a.dev, y, *p.a.dev, *x, p.path(2, 1)), 0);
    idle.push_back(x);
    idle.push_back(y);
  }
  p.run_until([&] { return false; }, 1'000'000);
  EXPECT_EQ(p.a.dev->active_qps(), 0u);
  Sge s{p.a.addr(), 256, p.a.mr->lkey};
  for (uint64_t k = 0; k < 50; ++k) {
    ASSERT_EQ(p.a.dev->post_send(p.a.qp, wr_to(p.b, k, WrOpcode::RdmaWrite, &s)), 0);
    size_t most = 0;
    Wc wc;
    bool got = false;
    p.run_until([&] {
      most = std::max(most, p.a.dev->active_qps());
      return got || (got = p.a.scq->poll(&wc, 1) == 1);
    });
    ASSERT_TRUE(got);
    EXPECT_EQ(wc.status, WcStatus::Success);
    EXPECT_LE(most, 1u) << "only the QP with traffic is on A's list";
  }
  for (Qp* x : idle) EXPECT_EQ(x->counters().sent_pkts, 0u);
}

// Issue 30: an SRQ shared by 10,000 QPs with traffic on all of them (four 64-byte SENDs each,
// 40,000 messages through 16,384 receive buffers posted again as they fill), and 16,384 QPs each
// with one READ outstanding at once. Every message arrives once, on its own QP, in order, every
// byte as sent; every READ completes with its own bytes (tests/support/many_pairs.hpp).
TEST(ManyQps, AnSrqSharedByTenThousandQpsReceivesEveryMessage) {
  ManyPairs::Options o;
  o.pairs = 10000;
  o.send_depth = 4;
  o.srq_depth = 16384;
  o.mem_a = size_t(10000) * 4 * 64;
  o.mem_b = size_t(16384) * 64;
  ManyPairs m(o);
  ASSERT_EQ(m.error, nullptr) << m.error;
  const ScaleResult r = srq_shared_by_all(m, 4);
  ASSERT_EQ(r.error, nullptr) << r.error;
  EXPECT_EQ(r.done, 40000u);
  EXPECT_EQ(r.wrong, 0u);
  uint64_t rnr = 0;
  for (Qp* q : m.qb) rnr += q->counters().send_rnr_err;
  EXPECT_EQ(rnr, 0u) << "the SRQ never ran dry";
}

TEST(ManyQps, SixteenThousandQpsEachWithAReadOutstandingAllComplete) {
  ManyPairs::Options o;
  o.pairs = 16384;
  o.send_depth = 1;
  o.mem_a = o.mem_b = size_t(16384) * 64;
  ManyPairs m(o);
  ASSERT_EQ(m.error, nullptr) << m.error;
  for (uint32_t i = 0; i < 16384; i += 4096) EXPECT_EQ(m.qa[i]->attr().max_rd_atomic, 1u);
  const ScaleResult r = one_read_per_qp(m);
  ASSERT_EQ(r.error, nullptr) << r.error;
  EXPECT_EQ(r.done, 16384u);
  EXPECT_EQ(r.wrong, 0u);
}

}  // namespace
}  // namespace uroce::test
