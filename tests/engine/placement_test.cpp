// IBA 1.5 annex A19 (memory placement extensions): ATOMIC WRITE and FLUSH. End to end over the
// fake wire (the bytes in the peer's memory, the completion, the frames on the wire), the
// responder fed crafted requests (its answer, what it placed, what it refused and how), the
// limits of post_send, and a lost answer (answered again, executed once).
#include <gtest/gtest.h>

#include <cstring>

#include "tests/support/harness.hpp"

namespace uroce::test {
namespace {

namespace op = proto::op;

constexpr uint32_t kFlushAccess = kFlushGlobal | kFlushPersistent;

PairOptions placement_options() {
  PairOptions o;
  o.mem = 8192;
  o.access = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic | kFlushAccess;
  o.qp_access = kRemoteWrite | kRemoteRead | kRemoteAtomic | kFlushAccess;
  return o;
}

// A signaled `op` aimed at offset `off` of B's registered buffer.
SendWr at_b(Pair& pr, WrOpcode op, uint64_t off, uint64_t id) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.send_flags = kSendSignaled;
  wr.remote_addr = pr.b.addr() + off;
  wr.rkey = pr.b.mr->rkey;
  return wr;
}

SendWr atomic_write(Pair& pr, uint64_t off, const uint8_t (&bytes)[8], uint64_t id = 1) {
  SendWr wr = at_b(pr, WrOpcode::AtomicWrite, off, id);
  std::memcpy(&wr.swap, bytes, 8);
  return wr;
}

SendWr flush(Pair& pr, uint64_t off, uint64_t len, uint8_t type, uint8_t level, uint64_t id = 2) {
  SendWr wr = at_b(pr, WrOpcode::Flush, off, id);
  wr.flush_type = type;
  wr.flush_level = level;
  wr.compare_add = len;
  return wr;
}

std::vector<proto::Packet> parsed(const std::vector<std::vector<uint8_t>>& frames) {
  std::vector<proto::Packet> v;
  for (const auto& f : frames) {
    proto::Packet p;
    EXPECT_TRUE(proto::parse(f, p).ok());
    v.push_back(p);
  }
  return v;
}

TEST(AtomicWrite, EightBytesLandAsGivenAndTheAnswerIsAnEmptyReadResponse) {
  Pair pr(placement_options());
  std::vector<std::vector<uint8_t>> from_a, from_b;
  pr.wire.a().tap = [&](const uint8_t* d, uint32_t n) { from_a.emplace_back(d, d + n); };
  pr.wire.b().tap = [&](const uint8_t* d, uint32_t n) { from_b.emplace_back(d, d + n); };
  std::memset(pr.b.buf(), 0x5A, 64);
  const uint8_t v[8] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, atomic_write(pr, 16, v)), 0);
  Wc wc;
  ASSERT_TRUE(pr.next_wc(pr.a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(wc.opcode, WcOpcode::AtomicWrite);
  EXPECT_EQ(wc.byte_len, 8u);
  EXPECT_EQ(std::memcmp(pr.b.buf() + 16, v, 8), 0) << "the bytes as given, not byte-swapped";
  for (int i : {0, 15, 24, 63}) EXPECT_EQ(pr.b.buf()[i], 0x5A) << i;
  EXPECT_TRUE(canaries_intact(pr.b));
  EXPECT_EQ(pr.b.qp->counters().atomic_writes, 1u);

  // On the wire: one RC_ATOMIC_WRITE (RETH length 8, the 8 bytes, AckReq) and one
  // RC_RDMA_READ_RESPONSE_ONLY with no payload, an ACK syndrome and the next MSN.
  const auto req = parsed(from_a), rsp = parsed(from_b);
  ASSERT_EQ(req.size(), 1u);
  EXPECT_EQ(req[0].opcode, op::kAtomicWrite);
  EXPECT_TRUE(req[0].ack_req);
  EXPECT_EQ(req[0].reth.va, pr.b.addr() + 16);
  EXPECT_EQ(req[0].reth.rkey, pr.b.mr->rkey);
  EXPECT_EQ(req[0].reth.dma_len, 8u);
  ASSERT_EQ(req[0].payload.size(), 8u);
  EXPECT_EQ(std::memcmp(req[0].payload.data(), v, 8), 0);
  ASSERT_EQ(rsp.size(), 1u);
  EXPECT_EQ(rsp[0].opcode, op::kReadRespOnly);
  EXPECT_EQ(rsp[0].psn, req[0].psn);
  EXPECT_TRUE(rsp[0].payload.empty());
  EXPECT_EQ(rsp[0].aeth.syndrome, 0x1F);
  EXPECT_EQ(rsp[0].aeth.msn, 1u);
}

TEST(Flush, AfterWritesARangeAndAWholeRegionComplete) {
  Pair pr(placement_options());
  std::vector<std::vector<uint8_t>> from_a, from_b;
  pr.wire.a().tap = [&](const uint8_t* d, uint32_t n) { from_a.emplace_back(d, d + n); };
  pr.wire.b().tap = [&](const uint8_t* d, uint32_t n) { from_b.emplace_back(d, d + n); };
  fill_pattern(pr.a.buf(), 4096, 7);
  Sge s{pr.a.addr(), 4096, pr.a.mr->lkey};
  SendWr w;
  w.opcode = WrOpcode::RdmaWrite;
  w.sg_list = &s;
  w.num_sge = 1;
  w.remote_addr = pr.b.addr();
  w.rkey = pr.b.mr->rkey;  // unsignaled: the FLUSH's completion follows it
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, w), 0);
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, flush(pr, 0, 4096, kFlushToPersistence, kFlushRange, 2)), 0);
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, flush(pr, 0, 0, kFlushToGlobal, kFlushMr, 3)), 0);
  for (uint64_t id : {2u, 3u}) {
    Wc wc;
    ASSERT_TRUE(pr.next_wc(pr.a.scq, wc));
    EXPECT_EQ(wc.wr_id, id);
    EXPECT_EQ(wc.status, WcStatus::Success);
    EXPECT_EQ(wc.opcode, WcOpcode::Flush);
  }
  EXPECT_EQ(std::memcmp(pr.a.buf(), pr.b.buf(), 4096), 0) << "the WRITE before the FLUSH is in place";
  EXPECT_EQ(pr.b.qp->counters().flushes, 2u);
  const auto req = parsed(from_a);
  std::vector<proto::Packet> flushes;
  for (const auto& p : req)
    if (p.opcode == op::kFlush) flushes.push_back(p);
  ASSERT_EQ(flushes.size(), 2u);
  EXPECT_EQ(flushes[0].feth.placement, kFlushToPersistence);
  EXPECT_EQ(flushes[0].feth.selectivity, kFlushRange);
  EXPECT_EQ(flushes[0].reth.dma_len, 4096u);
  EXPECT_EQ(flushes[1].feth.placement, kFlushToGlobal);
  EXPECT_EQ(flushes[1].feth.selectivity, kFlushMr);
  size_t empty_read_responses = 0;
  for (const auto& p : parsed(from_b))
    if (p.opcode == op::kReadRespOnly && p.payload.empty() && (p.psn == flushes[0].psn || p.psn == flushes[1].psn))
      ++empty_read_responses;
  EXPECT_EQ(empty_read_responses, 2u);
}

// What the peer refuses, and the completion the requester gets for it.
struct Refusal {
  const char* what;
  uint32_t mr_access;  // B's MR
  uint32_t qp_access;  // B's QP
  bool flush;
  uint64_t off;
  uint8_t type;
  uint8_t level;
  uint64_t len;
  WcStatus want;
};

void PrintTo(const Refusal& r, std::ostream* os) { *os << r.what; }

class Refused : public ::testing::TestWithParam<Refusal> {};

TEST_P(Refused, WithTheNakTheSpecNames) {
  const Refusal& r = GetParam();
  PairOptions o = placement_options();
  o.access = r.mr_access;
  o.qp_access = r.qp_access;
  Pair pr(o);
  std::memset(pr.b.buf(), 0x33, 64);
  const uint8_t v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const SendWr wr = r.flush ? flush(pr, r.off, r.len, r.type, r.level) : atomic_write(pr, r.off, v);
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, wr), 0);
  Wc wc;
  ASSERT_TRUE(pr.next_wc(pr.a.scq, wc));
  EXPECT_EQ(wc.status, r.want) << wc_status_name(wc.status);
  EXPECT_EQ(pr.b.qp->state(), QpState::Err) << "the responder's QP goes to ERR (IBA 9.9.3 class C)";
  for (int i = 0; i < 64; ++i) ASSERT_EQ(pr.b.buf()[i], 0x33) << "nothing placed";
  EXPECT_EQ(pr.b.qp->counters().atomic_writes + pr.b.qp->counters().flushes, 0u);
}

constexpr uint32_t kMrRw = kLocalWrite | kRemoteWrite | kRemoteRead;
constexpr uint32_t kQpRw = kRemoteWrite | kRemoteRead;
INSTANTIATE_TEST_SUITE_P(
    Placement, Refused,
    ::testing::Values(
        Refusal{"atomic write misaligned", kMrRw, kQpRw, false, 12, 0, 0, 0, WcStatus::RemInvReqErr},
        Refusal{"atomic write, MR read only", kLocalWrite | kRemoteRead, kQpRw, false, 16, 0, 0, 0,
                WcStatus::RemAccessErr},
        Refusal{"atomic write, QP without remote write", kMrRw, kRemoteRead, false, 16, 0, 0, 0,
                WcStatus::RemAccessErr},
        Refusal{"atomic write past the MR", kMrRw, kQpRw, false, 8192, 0, 0, 0, WcStatus::RemAccessErr},
        Refusal{"flush, MR without flush rights", kMrRw, kQpRw | kFlushGlobal, true, 0, kFlushToGlobal, kFlushRange, 64,
                WcStatus::RemAccessErr},
        Refusal{"flush persistent, MR global only", kMrRw | kFlushGlobal, kQpRw | kFlushAccess, true, 0,
                kFlushToPersistence, kFlushRange, 64, WcStatus::RemAccessErr},
        Refusal{"flush, QP without flush rights", kMrRw | kFlushAccess, kQpRw, true, 0, kFlushToGlobal, kFlushMr, 0,
                WcStatus::RemInvReqErr},
        Refusal{"flush range past the MR", kMrRw | kFlushAccess, kQpRw | kFlushAccess, true, 4096, kFlushToGlobal,
                kFlushRange, 8192, WcStatus::RemAccessErr}),
    [](const auto& info) {
      std::string n = info.param.what;
      for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return n;
    });

TEST(Placement, PostSendRefusesWhatCannotGoOnTheWire) {
  Pair pr(placement_options());
  const uint8_t v[8] = {};
  Sge s{pr.a.addr(), 8, pr.a.mr->lkey};
  SendWr aw = atomic_write(pr, 0, v);
  aw.sg_list = &s;
  aw.num_sge = 1;
  EXPECT_EQ(pr.a.dev->post_send(pr.a.qp, aw), EINVAL) << "the 8 bytes travel in the WR, not in an SGE";
  EXPECT_EQ(pr.a.dev->post_send(pr.a.qp, flush(pr, 0, 64, 0, kFlushRange)), EINVAL) << "no placement type";
  EXPECT_EQ(pr.a.dev->post_send(pr.a.qp, flush(pr, 0, 64, 4, kFlushRange)), EINVAL) << "a reserved placement type";
  EXPECT_EQ(pr.a.dev->post_send(pr.a.qp, flush(pr, 0, 64, kFlushToGlobal, 2)), EINVAL) << "a reserved selectivity";
  EXPECT_EQ(pr.a.dev->post_send(pr.a.qp, flush(pr, 0, param::kMaxMessage + 1, kFlushToGlobal, kFlushRange)), EINVAL);

  PairOptions uc = placement_options();
  uc.qp_type = QpType::UC;
  Pair pu(uc);
  EXPECT_EQ(pu.a.dev->post_send(pu.a.qp, atomic_write(pu, 0, v)), EINVAL) << "RC only";
  EXPECT_EQ(pu.a.dev->post_send(pu.a.qp, flush(pu, 0, 64, kFlushToGlobal, kFlushRange)), EINVAL) << "RC only";
}

// The answer is lost: the requester asks again; the responder answers from its resource and
// does not place the 8 bytes a second time (the application changed them in between).
TEST(Placement, ALostAnswerIsGivenAgainWithoutPlacingTwice) {
  Pair pr(placement_options());
  int answers = 0;
  pr.wire.b().filter = [&](const uint8_t* d, uint32_t n) {
    proto::Packet p;
    if (!proto::parse({d, n}, p).ok() || p.opcode != op::kReadRespOnly) return true;
    return ++answers > 1;  // the first answer is lost
  };
  const uint8_t v[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, atomic_write(pr, 8, v)), 0);
  ASSERT_TRUE(pr.run_until([&] { return answers == 1; }));
  std::memset(pr.b.buf() + 8, 0x77, 8);  // the application writes over the placed value
  Wc wc;
  ASSERT_TRUE(pr.next_wc(pr.a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(answers, 2);
  for (int i = 8; i < 16; ++i) EXPECT_EQ(pr.b.buf()[i], 0x77) << "placed once, not again on the repeat";
  EXPECT_EQ(pr.b.qp->counters().atomic_writes, 1u);
  EXPECT_GE(pr.b.qp->counters().duplicate_request, 1u);
}

// Crafted requests into B's responder: what it answers.
class PlacementResponder : public ::testing::Test {
 protected:
  void SetUp() override {
    pr = std::make_unique<Pair>(placement_options());
    pr->wire.b().tap = [this](const uint8_t* d, uint32_t n) { out.emplace_back(d, d + n); };
    epsn = pr->b.qp->expected_psn();
  }
  proto::Packet request(uint8_t opcode, uint32_t psn) { return forge(pr->a, pr->b, opcode, psn); }
  void inject(const proto::Packet& p) {
    test::inject(pr->wire.b(), p);
    pr->b.dev->progress();
    pr->b.dev->progress();
  }
  proto::Packet last() {
    proto::Packet p;
    EXPECT_FALSE(out.empty());
    if (!out.empty()) {
      EXPECT_TRUE(proto::parse(out.back(), p).ok());
    }
    return p;
  }
  std::unique_ptr<Pair> pr;
  std::vector<std::vector<uint8_t>> out;
  uint32_t epsn = 0;
};

TEST_F(PlacementResponder, ADuplicateIsAnsweredAgainNotPlacedAgain) {
  const uint8_t v[8] = {0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7};
  proto::Packet p = request(op::kAtomicWrite, epsn);
  p.reth = {pr->b.addr() + 32, pr->b.mr->rkey, 8};
  p.payload = v;
  inject(p);
  ASSERT_EQ(std::memcmp(pr->b.buf() + 32, v, 8), 0);
  std::memset(pr->b.buf() + 32, 0, 8);
  inject(p);
  ASSERT_EQ(out.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    proto::Packet r;
    ASSERT_TRUE(proto::parse(out[i], r).ok());
    EXPECT_EQ(r.opcode, op::kReadRespOnly);
    EXPECT_EQ(r.psn, epsn);
    EXPECT_EQ(r.aeth.msn, 1u);
    EXPECT_TRUE(r.payload.empty());
  }
  for (int i = 32; i < 40; ++i) EXPECT_EQ(pr->b.buf()[i], 0) << "executed once";
  EXPECT_EQ(pr->b.qp->expected_psn(), proto::psn_add(epsn, 1));
}

TEST_F(PlacementResponder, AWrongLengthIsAnInvalidRequest) {
  const uint8_t v[16] = {};
  proto::Packet p = request(op::kAtomicWrite, epsn);
  p.reth = {pr->b.addr(), pr->b.mr->rkey, 16};
  p.payload = v;
  inject(p);
  proto::Packet r = last();
  EXPECT_EQ(r.opcode, op::kAck);
  EXPECT_EQ(r.aeth.syndrome, proto::Syndrome::nak(proto::NakCode::InvalidRequest).encode());
  EXPECT_EQ(pr->b.qp->state(), QpState::Err);
}

TEST_F(PlacementResponder, AReservedSelectivityIsAnInvalidRequest) {
  proto::Packet p = request(op::kFlush, epsn);
  p.feth = {kFlushToGlobal, 2, 0};
  p.reth = {pr->b.addr(), pr->b.mr->rkey, 64};
  inject(p);
  proto::Packet r = last();
  EXPECT_EQ(r.opcode, op::kAck);
  EXPECT_EQ(r.aeth.syndrome, proto::Syndrome::nak(proto::NakCode::InvalidRequest).encode());
  EXPECT_EQ(pr->b.qp->counters().flushes, 0u);
}

TEST_F(PlacementResponder, AFlushOfAWholeRegionNeedsNoRangeAndAnswersInOrderAfterARead) {
  // A READ of 2000 bytes (two responses at the pair's MTU of 1024) and a FLUSH behind it: the
  // FLUSH's answer follows the READ's, PSN after PSN.
  proto::Packet rd = request(op::kReadRequest, epsn);
  rd.reth = {pr->b.addr(), pr->b.mr->rkey, 2000};  // two responses at MTU 1024
  proto::Packet fl = request(op::kFlush, proto::psn_add(epsn, 2));
  fl.feth = {kFlushToGlobal | kFlushToPersistence, kFlushMr, 0};
  fl.reth = {0, pr->b.mr->rkey, 0};  // the whole region: no address, no length
  test::inject(pr->wire.b(), rd);
  test::inject(pr->wire.b(), fl);
  for (int i = 0; i < 4; ++i) pr->b.dev->progress();
  ASSERT_EQ(out.size(), 3u);
  const uint8_t want[] = {op::kReadRespFirst, op::kReadRespLast, op::kReadRespOnly};
  for (size_t i = 0; i < 3; ++i) {
    proto::Packet r;
    ASSERT_TRUE(proto::parse(out[i], r).ok());
    EXPECT_EQ(r.opcode, want[i]) << i;
    EXPECT_EQ(r.psn, proto::psn_add(epsn, int32_t(i))) << i;
  }
  proto::Packet r = last();
  EXPECT_TRUE(r.payload.empty());
  EXPECT_EQ(r.aeth.msn, 2u);
  EXPECT_EQ(pr->b.qp->counters().flushes, 1u);
}

}  // namespace
}  // namespace uroce::test
