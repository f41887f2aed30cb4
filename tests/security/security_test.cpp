// Security: forged frames with a valid ICRC against a connected pair on the FakeLink. Each
// test asserts the exact outcome: no byte outside a live registration changes, the right NAK
// or counted drop, the right completion on the right wr_id, no crash, no hang. The numbers in
// the names are the findings of docs/security.md.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>

#include "proto/icrc.hpp"
#include "tests/support/harness.hpp"

namespace uroce::test {
namespace {

namespace op = proto::op;

// Frames one end emits on link `l` from its construction on, parsed, with helpers to find NAKs
// and responses.
struct Tap {
  std::vector<proto::Packet> frames;
  std::vector<std::vector<uint8_t>> bytes;
  explicit Tap(FakeLink& l) {
    l.tap = [this](const uint8_t* d, uint32_t n) {
      bytes.emplace_back(d, d + n);
      proto::Packet p;
      ASSERT_TRUE(proto::parse(bytes.back(), p).ok());
      p.payload = {};  // the bytes behind it are not kept
      frames.push_back(p);
    };
  }
  size_t count(uint8_t opcode) const {
    size_t n = 0;
    for (auto& p : frames) n += p.opcode == opcode;
    return n;
  }
  size_t read_responses() const {
    return count(op::kReadRespOnly) + count(op::kReadRespFirst) + count(op::kReadRespMiddle) +
           count(op::kReadRespLast);
  }
  const proto::Packet* last_nak() const {
    for (auto it = frames.rbegin(); it != frames.rend(); ++it)
      if (it->opcode == op::kAck && (it->aeth.syndrome & 0x60) == 0x60) return &*it;
    return nullptr;
  }
};

PairOptions small(Mtu mtu = Mtu::M1024) {
  PairOptions o;
  o.mtu = mtu;
  o.mem = 1 << 16;
  return o;
}

// A WRITE ONLY from A at `psn` carrying `payload` (which must outlive the packet) to the start
// of B's buffer.
proto::Packet write_only_to_b(Pair& pr, uint32_t psn, const std::vector<uint8_t>& payload) {
  proto::Packet p = forge(pr.a, pr.b, op::kWriteOnly, psn);
  p.reth = {pr.b.addr(), pr.b.mr->rkey, uint32_t(payload.size())};
  p.payload = {payload.data(), payload.size()};
  return p;
}

// ---- 1: after deregistration no packet reads or writes the memory ---------------------------

TEST(Security1, DeregMidWriteStopsTheRestOfTheMessage) {
  Pair pr(small());
  Tap tb(pr.wire.b());
  std::vector<uint8_t> payload(1024, 0x77);
  const uint32_t epsn = pr.b.qp->expected_psn();
  proto::Packet p = forge(pr.a, pr.b, op::kWriteFirst, epsn);
  p.reth = {pr.b.addr(), pr.b.mr->rkey, 3 * 1024};
  p.payload = {payload.data(), 1024};
  inject(pr.wire.b(), p);
  pr.b.dev->progress();
  EXPECT_EQ(pr.b.buf()[0], 0x77);
  // The application deregisters (and may free) the buffer mid-message.
  std::memset(pr.b.buf(), 0xEE, 4096);
  ASSERT_EQ(pr.b.dev->dereg_mr(pr.b.mr), 0);
  proto::Packet m = forge(pr.a, pr.b, op::kWriteMiddle, proto::psn_add(epsn, 1));
  m.payload = {payload.data(), 1024};
  inject(pr.wire.b(), m);
  pr.b.dev->progress();
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(pr.b.buf()[i], 0xEE) << "byte " << i << " written after dereg";
  const proto::Packet* nak = tb.last_nak();
  ASSERT_NE(nak, nullptr);
  EXPECT_EQ(nak->aeth.syndrome, 0x62) << "NAK remote access error";
  EXPECT_EQ(nak->psn, proto::psn_add(epsn, 1));
  EXPECT_EQ(pr.b.qp->state(), QpState::Err);
  EXPECT_TRUE(canaries_intact(pr.b));
}

TEST(Security1, DuplicateReadAfterDeregIsNakedNotAnswered) {
  Pair pr(small());
  Tap tb(pr.wire.b());
  fill_pattern(pr.b.buf(), 2048, 3);
  const uint32_t epsn = pr.b.qp->expected_psn();
  proto::Packet rd = forge(pr.a, pr.b, op::kReadRequest, epsn);
  rd.reth = {pr.b.addr(), pr.b.mr->rkey, 2048};
  inject(pr.wire.b(), rd);
  pr.b.dev->progress();
  EXPECT_EQ(tb.read_responses(), 2u);
  ASSERT_EQ(pr.b.dev->dereg_mr(pr.b.mr), 0);
  tb.frames.clear();
  inject(pr.wire.b(), rd);  // the same READ again: a duplicate, once answered from the saved range
  pr.b.dev->progress();
  pr.b.dev->progress();
  EXPECT_EQ(tb.read_responses(), 0u) << "a deregistered buffer is never read again";
  const proto::Packet* nak = tb.last_nak();
  ASSERT_NE(nak, nullptr);
  EXPECT_EQ(nak->aeth.syndrome, 0x62);
  EXPECT_EQ(pr.b.qp->state(), QpState::Err);
}

TEST(Security1, LocalDeregStopsReadResponsesLandingAndNamesTheWqe) {
  Pair pr(small());
  Sge sge{pr.a.addr(), 4096, pr.a.mr->lkey};
  SendWr wr = wr_to(pr.b, 41, WrOpcode::RdmaRead, &sge);
  fill_pattern(pr.b.buf(), 4096, 9);
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, wr), 0);
  pr.a.dev->progress();  // the READ request goes out
  std::memset(pr.a.buf(), 0xEE, 4096);
  ASSERT_EQ(pr.a.dev->dereg_mr(pr.a.mr), 0);
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(pr.a.scq, wc, 41u, WcStatus::LocProtErr));
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(pr.a.buf()[i], 0xEE) << "byte " << i << " written after dereg";
  EXPECT_EQ(pr.a.qp->state(), QpState::Err);
}

// ---- 2: a READ request with a DMA length near 2^32 ----------------------------------------

TEST(Security2, ReadLengthNear4GiBIsAnInvalidRequest) {
  Pair pr(small(Mtu::M256));
  // An MR larger than 4 GiB (address space only: nothing is touched).
  const size_t big = (size_t(1) << 32) + (1 << 20);
  void* m = mmap(nullptr, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  Mr* mr = pr.b.dev->reg_mr(pr.b.pd, m, big, kLocalWrite | kRemoteRead);
  ASSERT_NE(mr, nullptr);
  Tap tb(pr.wire.b());
  proto::Packet rd = forge(pr.a, pr.b, op::kReadRequest, pr.b.qp->expected_psn());
  rd.reth = {reinterpret_cast<uintptr_t>(m), mr->rkey, 0xFFFFFFFFu};  // (len + mtu - 1) wraps in 32 bits
  inject(pr.wire.b(), rd);
  for (int i = 0; i < 4; ++i) pr.b.dev->progress();
  EXPECT_EQ(tb.read_responses(), 0u);
  const proto::Packet* nak = tb.last_nak();
  ASSERT_NE(nak, nullptr);
  EXPECT_EQ(nak->aeth.syndrome, 0x61) << "NAK invalid request";
  EXPECT_EQ(pr.b.qp->state(), QpState::Err);
  pr.b.dev->dereg_mr(mr);
  munmap(m, big);
}

// ---- 3: forged responses ----------------------------------------------------------------------

TEST(Security3, ForgedReadResponseAndAtomicAckCompleteNothing) {
  Pair pr(small());
  // A SEND is sent but not yet acknowledged (B's frames are held back).
  pr.wire.a().filter = [](const uint8_t*, uint32_t) { return false; };  // A's receive side hears nothing from B
  Sge sge{pr.a.addr(), 64, pr.a.mr->lkey};
  SendWr wr = wr_to(pr.b, 7, WrOpcode::RdmaWrite, &sge);
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, wr), 0);
  pr.a.dev->progress();
  pr.wire.a().filter = nullptr;
  const uint32_t sent_psn = proto::psn_add(pr.a.qp->next_send_psn(), -1);
  for (int32_t ahead : {0, 1, 1000, 0x7FFFFF}) {
    proto::Packet r = forge(pr.b, pr.a, op::kReadRespOnly, proto::psn_add(sent_psn, ahead));
    r.aeth = {0x1F, 1};
    std::vector<uint8_t> junk(64, 0x99);
    r.payload = {junk.data(), 64};
    inject(pr.wire.a(), r);
    proto::Packet at = forge(pr.b, pr.a, op::kAtomicAck, proto::psn_add(sent_psn, ahead));
    at.aeth = {0x1F, 1};
    at.atomic_ack_orig = 0x1122334455667788ull;
    inject(pr.wire.a(), at);
  }
  pr.a.dev->progress();
  Wc wc;
  EXPECT_EQ(pr.a.scq->poll(&wc, 1), 0u) << "a WRITE completed on a forged response";
  EXPECT_EQ(pr.a.qp->counters().ghost_responses, 8u);
  EXPECT_EQ(pr.a.qp->state(), QpState::Rts);
  // The real ACK still completes it.
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(pr.a.scq, wc, 7u, WcStatus::Success));
}

// ---- 4: source check ---------------------------------------------------------------------------

TEST(Security4, RequestFromAnotherAddressIsDroppedAndCounted) {
  Pair pr(small());
  Tap tb(pr.wire.b());
  std::vector<uint8_t> payload(64, 0x55);
  std::memset(pr.b.buf(), 0, 64);
  const uint32_t epsn = pr.b.qp->expected_psn();
  proto::Packet p = write_only_to_b(pr, epsn, payload);
  p.ip_src[3] ^= 0x40;  // 198.18.0.10 -> another host
  inject(pr.wire.b(), p);
  pr.b.dev->progress();
  pr.b.dev->progress();
  EXPECT_EQ(tb.frames.size(), 0u) << "no ACK or NAK to a spoofed source";
  EXPECT_EQ(pr.b.buf()[0], 0);
  EXPECT_EQ(pr.b.qp->counters().dropped_source, 1u);
  EXPECT_EQ(pr.b.qp->expected_psn(), epsn);
}

// ---- 5: unpredictable keys and QP numbers ------------------------------------------------------

TEST(Security5, QpNumbersAreRandomAndNeverSpecial) {
  PairOptions o = small();
  Pair pr(o);
  std::set<uint32_t> seen;
  uint32_t ones = 0, zeros = 0;
  for (int i = 0; i < 200; ++i) {
    QpInitAttr ia;
    ia.pd = pr.a.pd;
    ia.send_cq = pr.a.scq;
    ia.recv_cq = pr.a.rcq;
    Qp* q = pr.a.dev->create_qp(ia);
    ASSERT_NE(q, nullptr);
    const uint32_t n = q->qpn();
    EXPECT_GE(n, 2u);
    EXPECT_LE(n, 0xFFFFFFu);
    EXPECT_TRUE(seen.insert(n).second) << "QPN reused: " << n;
    ones |= n;
    zeros |= ~n & 0xFFFFFF;
    EXPECT_EQ(pr.a.dev->qp_by_num(n), q);
    ASSERT_EQ(pr.a.dev->destroy_qp(q), 0);
    EXPECT_EQ(pr.a.dev->qp_by_num(n), nullptr);
  }
  EXPECT_EQ(ones, 0xFFFFFFu);
  EXPECT_EQ(zeros, 0xFFFFFFu);
}

TEST(Security5, AnLkeyOpensNoRemoteAccess) {
  Pair pr(small());
  Tap tb(pr.wire.b());
  std::vector<uint8_t> payload(64, 0x55);
  std::memset(pr.b.buf(), 0, 64);
  proto::Packet p = forge(pr.a, pr.b, op::kWriteOnly, pr.b.qp->expected_psn());
  p.reth = {pr.b.addr(), pr.b.mr->lkey, 64};
  p.payload = {payload.data(), 64};
  inject(pr.wire.b(), p);
  pr.b.dev->progress();
  EXPECT_EQ(pr.b.buf()[0], 0);
  const proto::Packet* nak = tb.last_nak();
  ASSERT_NE(nak, nullptr);
  EXPECT_EQ(nak->aeth.syndrome, 0x62);
}

// ---- 6: duplicate-READ amplification -------------------------------------------------------------

TEST(Security6, DuplicateReadIsAnsweredInBoundedSteps) {
  PairOptions o = small(Mtu::M256);
  o.mem = 1 << 20;
  Pair pr(o);
  Tap tb(pr.wire.b());
  const uint32_t epsn = pr.b.qp->expected_psn();
  proto::Packet rd = forge(pr.a, pr.b, op::kReadRequest, epsn);
  rd.reth = {pr.b.addr(), pr.b.mr->rkey, 1 << 20};  // 4096 responses at MTU 256
  inject(pr.wire.b(), rd);
  size_t before = 0;
  for (int i = 0; i < 200 && tb.read_responses() < 4096; ++i) {
    pr.b.dev->progress();
    EXPECT_LE(tb.read_responses() - before, param::kRespBurst) << "one progress() sent too much";
    before = tb.read_responses();
  }
  ASSERT_EQ(tb.read_responses(), 4096u);
  // A forged duplicate of the whole READ: replayed, but never more than a burst per call.
  inject(pr.wire.b(), rd);
  before = tb.read_responses();
  pr.b.dev->progress();
  EXPECT_LE(tb.read_responses() - before, param::kRespBurst);
  EXPECT_GT(pr.b.qp->counters().replayed_responses, 0u);
  EXPECT_LE(pr.b.qp->counters().replayed_responses, param::kRespBurst);
}

// ---- 8: resource lifetimes and error attribution --------------------------------------------

TEST(Security8, DeallocPdWithLiveMrIsBusy) {
  Pair pr(small());
  Pd* pd = pr.a.dev->alloc_pd();
  std::vector<uint8_t> m(4096);
  Mr* mr = pr.a.dev->reg_mr(pd, m.data(), m.size(), kLocalWrite);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(pr.a.dev->dealloc_pd(pd), EBUSY);
  ASSERT_EQ(pr.a.dev->dereg_mr(mr), 0);
  EXPECT_EQ(pr.a.dev->dealloc_pd(pd), 0);
}

TEST(Security8, RegisteringUnmappedMemoryIsEfault) {
  Pair pr(small());
  const size_t len = 1 << 16;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  ASSERT_EQ(munmap(static_cast<uint8_t*>(m) + len / 2, len / 2), 0);  // the second half is gone
  errno = 0;
  EXPECT_EQ(pr.a.dev->reg_mr(pr.a.pd, m, len, kLocalWrite), nullptr);
  EXPECT_EQ(errno, EFAULT);
  Mr* ok = pr.a.dev->reg_mr(pr.a.pd, m, len / 2, kLocalWrite);
  EXPECT_NE(ok, nullptr);
  pr.a.dev->dereg_mr(ok);
  errno = 0;
  EXPECT_EQ(pr.a.dev->reg_mr(pr.a.pd, m, param::kMaxMrSize + 1, kLocalWrite), nullptr);
  EXPECT_EQ(errno, EINVAL);
  munmap(m, len / 2);
}

TEST(Security8, ProtectionErrorBehindAnInFlightWqeNamesItsOwnWrId) {
  Pair pr(small());
  pr.wire.a().filter = [](const uint8_t*, uint32_t) { return false; };  // keep WR 1 in flight
  Sge good{pr.a.addr(), 64, pr.a.mr->lkey};
  Sge bad{pr.a.addr(), 64, pr.a.mr->lkey ^ 0x5A5A};
  SendWr w1 = wr_to(pr.b, 1, WrOpcode::RdmaWrite, &good);
  SendWr w2 = w1;
  w2.wr_id = 2;
  w2.sg_list = &bad;
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, w1), 0);
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, w2), 0);
  pr.a.dev->progress();
  Wc wc[2];
  ASSERT_EQ(pr.a.scq->poll(wc, 2), 2u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].status, WcStatus::WrFlushErr);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(wc[1].status, WcStatus::LocProtErr);
  EXPECT_EQ(pr.a.qp->state(), QpState::Err);
}

// ---- 9: inherent in RoCE, and bounded --------------------------------------------------------------

TEST(Security9, ForgedNakInsideTheWindowMovesTheQpToError) {
  Pair pr(small());
  pr.wire.a().filter = [](const uint8_t*, uint32_t) { return false; };
  Sge sge{pr.a.addr(), 64, pr.a.mr->lkey};
  SendWr wr = wr_to(pr.b, 5, WrOpcode::RdmaWrite, &sge);
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, wr), 0);
  pr.a.dev->progress();
  pr.wire.a().filter = nullptr;
  proto::Packet nak = forge(pr.b, pr.a, op::kAck, proto::psn_add(pr.a.qp->next_send_psn(), -1));
  nak.aeth = {0x62, 0};
  inject(pr.wire.a(), nak);
  pr.a.dev->progress();
  Wc wc;
  ASSERT_EQ(pr.a.scq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.status, WcStatus::RemAccessErr);
  EXPECT_EQ(pr.a.qp->state(), QpState::Err);
}

TEST(Security9, ForgedRnrNaksStallButNeverHang) {
  PairOptions o = small();
  o.rnr_retry = 7;  // retry for ever
  Pair pr(o);
  Sge sge{pr.a.addr(), 64, pr.a.mr->lkey};
  SendWr wr = wr_to(pr.b, 6, WrOpcode::RdmaWrite, &sge);
  pr.wire.a().filter = [](const uint8_t*, uint32_t) { return false; };
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, wr), 0);
  for (int i = 0; i < 20; ++i) {  // an attacker answers every send with RNR NAK (timer 31: 491 ms)
    pr.a.dev->progress();
    proto::Packet rnr = forge(pr.b, pr.a, op::kAck, proto::psn_add(pr.a.qp->next_send_psn(), -1));
    rnr.aeth = {uint8_t(0x20 | 31), 0};
    inject(pr.wire.a(), rnr);
    pr.a.dev->progress();
    EXPECT_EQ(pr.a.qp->req_state(), ReqState::WaitRnr);
    pr.wire.clock().advance(500'000'000);
  }
  EXPECT_EQ(pr.a.qp->counters().rcvd_rnr_err, 20u);
  pr.wire.a().filter = nullptr;  // the attacker stops: the transfer completes
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(pr.a.scq, wc, 6u, WcStatus::Success));
}

TEST(Security9, RequestAheadOfTheExpectedPsnGetsOneSequenceNak) {
  Pair pr(small());
  Tap tb(pr.wire.b());
  std::vector<uint8_t> payload(8, 0x55);
  proto::Packet p = write_only_to_b(pr, proto::psn_add(pr.b.qp->expected_psn(), 1000), payload);
  inject(pr.wire.b(), p);
  inject(pr.wire.b(), p);
  pr.b.dev->progress();
  pr.b.dev->progress();
  ASSERT_EQ(tb.frames.size(), 1u);
  EXPECT_EQ(tb.frames[0].aeth.syndrome, 0x60);
  EXPECT_NE(pr.b.buf()[0], 0x55);
  EXPECT_EQ(pr.b.qp->state(), QpState::Rts);
}

// A reserved RC opcode (0x15, here with a SEND ONLY's bytes) with a good ICRC at the expected PSN
// is an invalid request: one NAK (0x61) at its PSN, the QP to ERR, nothing delivered. The same
// frame with a bad ICRC is dropped and counted, and gets no answer; ahead of the expected PSN it is
// a gap's sequence NAK.
std::vector<uint8_t> reserved_opcode_frame(Pair& pr, uint32_t psn, const std::vector<uint8_t>& payload,
                                           bool good_icrc) {
  proto::Packet p = forge(pr.a, pr.b, op::kSendOnly, psn);
  p.payload = {payload.data(), payload.size()};
  std::vector<uint8_t> f(proto::frame_len(p));
  EXPECT_TRUE(proto::build(p, f).ok());
  f[14 + 20 + 8] = 0x15;  // the opcode byte (IPv4, no tags)
  const uint32_t icrc = proto::icrc_compute_inplace(f.data() + 14, f.size() - 14 - proto::kIcrcSize, 20);
  std::memcpy(f.data() + f.size() - proto::kIcrcSize, &icrc, 4);
  if (!good_icrc) f.back() ^= 0xFF;
  return f;
}

TEST(Security10, ReservedOpcodeIsAnInvalidRequestUnlessCorrupt) {
  std::vector<uint8_t> payload(16, 0x55);
  {
    Pair pr(small());
    Tap tb(pr.wire.b());
    const uint32_t epsn = pr.b.qp->expected_psn();
    auto bad = reserved_opcode_frame(pr, epsn, payload, false);
    pr.wire.b().inject(bad.data(), uint32_t(bad.size()));
    pr.b.dev->progress();
    EXPECT_EQ(tb.frames.size(), 0u) << "a corrupt frame was answered";
    EXPECT_EQ(pr.b.qp->state(), QpState::Rts);
    auto good = reserved_opcode_frame(pr, epsn, payload, true);
    pr.wire.b().inject(good.data(), uint32_t(good.size()));
    pr.b.dev->progress();
    ASSERT_EQ(tb.frames.size(), 1u);
    EXPECT_EQ(tb.frames[0].opcode, op::kAck);
    EXPECT_EQ(tb.frames[0].aeth.syndrome, 0x61);
    EXPECT_EQ(tb.frames[0].psn, epsn);
    EXPECT_EQ(pr.b.qp->state(), QpState::Err);
    EXPECT_EQ(pr.b.qp->ctr.reserved_opcode, 1u);
  }
  {
    Pair pr(small());
    Tap tb(pr.wire.b());
    const uint32_t epsn = pr.b.qp->expected_psn();
    auto ahead = reserved_opcode_frame(pr, proto::psn_add(epsn, 3), payload, true);
    pr.wire.b().inject(ahead.data(), uint32_t(ahead.size()));
    pr.b.dev->progress();
    ASSERT_EQ(tb.frames.size(), 1u);
    EXPECT_EQ(tb.frames[0].aeth.syndrome, 0x60);
    EXPECT_EQ(tb.frames[0].psn, epsn);
    EXPECT_EQ(pr.b.qp->state(), QpState::Rts);
  }
}

}  // namespace
}  // namespace uroce::test
