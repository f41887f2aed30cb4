// Remote access violations and local errors. For WRITE, READ and both atomics: a wrong rkey,
// one byte out of bounds at either end, a missing access right, an MR of another PD and a
// deregistered MR each make the responder NAK with "remote access error" (AETH syndrome
// 0x62, as Linux rxe sends: ../shared/golden/rxe/write_nak_rkey.pcap) and go to ERR; the
// requester completes with IBV_WC_REM_ACCESS_ERR, goes to ERR and flushes what follows; and
// nothing is written anywhere (canary bytes around the MR, the MR's own bytes, the
// requester's local buffer for READ and atomics).
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "tests/support/golden.hpp"
#include "tests/support/harness.hpp"

namespace uroce::test {
namespace {

constexpr uint32_t kAllAccess = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic;
constexpr uint8_t kNakInvalidRequest = 0x61;
constexpr uint8_t kNakRemoteAccess = 0x62;
constexpr uint8_t kNakRemoteOp = 0x63;

// A registered buffer with canaries around it, like the harness's, for MRs with other
// rights or in another PD.
struct Region {
  std::vector<uint8_t> mem;
  Mr* mr = nullptr;
  static constexpr size_t kC = Endpoint::kCanary;
  Region(Device& dev, Pd* pd, size_t n, uint32_t access, uint8_t fill = 0x3C) : mem(n + 2 * kC, 0xCC) {
    std::memset(mem.data() + kC, fill, n);
    mr = dev.reg_mr(pd, buf(), n, access);
  }
  uint8_t* buf() { return mem.data() + kC; }
  size_t len() const { return mem.size() - 2 * kC; }
  uint64_t addr() { return reinterpret_cast<uintptr_t>(buf()); }
  bool canaries_ok() const {
    for (size_t i = 0; i < kC; ++i)
      if (mem[i] != 0xCC || mem[mem.size() - 1 - i] != 0xCC) return false;
    return true;
  }
};

// Every frame one end emits, parsed.
struct Capture {
  std::vector<std::vector<uint8_t>> frames;
  void attach(FakeLink& l) {
    l.tap = [this](const uint8_t* d, uint32_t n) { frames.emplace_back(d, d + n); };
  }
  // The ACKNOWLEDGE frames whose AETH is a NAK (not ACK, not RNR NAK).
  std::vector<proto::Packet> naks() const {
    std::vector<proto::Packet> v;
    for (const auto& f : frames) {
      proto::Packet p;
      proto::ParseResult r = proto::parse(std::span<const uint8_t>(f.data(), f.size()), p);
      EXPECT_TRUE(r.ok()) << r.message();
      if (!r.ok()) continue;
      if (p.opcode == proto::op::kAck && proto::Syndrome::decode(p.aeth.syndrome).kind == proto::AckKind::Nak)
        v.push_back(p);
    }
    return v;
  }
};

// B's buffer filled with 0x3C (a stray write shows) and B's frames from now on in `cap`.
void watch_b(Pair& pr, Capture& cap) {
  std::memset(pr.b.buf(), 0x3C, pr.b.buf_len());
  cap.attach(pr.wire.b());
}

enum class Op { Write, Read, CmpSwap, FetchAdd };
constexpr Op kOps[] = {Op::Write, Op::Read, Op::CmpSwap, Op::FetchAdd};
const char* op_name(Op o) {
  switch (o) {
    case Op::Write: return "WRITE";
    case Op::Read: return "READ";
    case Op::CmpSwap: return "CMP_SWAP";
    case Op::FetchAdd: return "FETCH_ADD";
  }
  return "?";
}
bool is_atomic(Op o) { return o == Op::CmpSwap || o == Op::FetchAdd; }
WcOpcode wc_of(Op o) {
  switch (o) {
    case Op::Write: return WcOpcode::RdmaWrite;
    case Op::Read: return WcOpcode::RdmaRead;
    case Op::CmpSwap: return WcOpcode::CompSwap;
    case Op::FetchAdd: return WcOpcode::FetchAdd;
  }
  return WcOpcode::Send;
}

// What the bad request targets on B.
struct Target {
  uint64_t va;
  uint32_t rkey;
  uint32_t len;  // WRITE/READ length (atomics are always 8)
};

enum class Violation {
  WrongRkey, WrongKeyByte, BelowStart, PastEnd, LenOnePastEnd, AlignedBelow, AlignedPastEnd, NoRight,
  QpNoRight, OtherPd, Deregistered,
};
// For every operation.
constexpr Violation kViolations[] = {
    Violation::WrongRkey, Violation::WrongKeyByte, Violation::BelowStart, Violation::PastEnd,
    Violation::NoRight,   Violation::QpNoRight,    Violation::OtherPd,    Violation::Deregistered,
};
// WRITE and READ: a length one byte too long. Atomics have no length; one byte out at either
// end is also misaligned for them (the bounds check comes first, as in rxe), so they are
// also tested 8 bytes out, aligned.
constexpr Violation kLengthViolations[] = {Violation::LenOnePastEnd};
constexpr Violation kAlignedViolations[] = {Violation::AlignedBelow, Violation::AlignedPastEnd};
const char* violation_name(Violation v) {
  switch (v) {
    case Violation::WrongRkey: return "WrongRkey";
    case Violation::WrongKeyByte: return "WrongKeyByte";
    case Violation::BelowStart: return "OneByteBelowStart";
    case Violation::PastEnd: return "OneBytePastEnd";
    case Violation::LenOnePastEnd: return "LengthOnePastEnd";
    case Violation::AlignedBelow: return "AlignedEightBelowStart";
    case Violation::AlignedPastEnd: return "AlignedAtEnd";
    case Violation::NoRight: return "MrLacksRight";
    case Violation::QpNoRight: return "QpLacksRight";
    case Violation::OtherPd: return "MrOfAnotherPd";
    case Violation::Deregistered: return "DeregisteredMr";
  }
  return "?";
}

uint32_t right_for(Op o) {
  switch (o) {
    case Op::Write: return kRemoteWrite;
    case Op::Read: return kRemoteRead;
    default: return kRemoteAtomic;
  }
}

constexpr size_t kMem = 4096;
constexpr uint32_t kLen = 64;  // WRITE/READ length where the violation does not set it

struct Result {
  Wc first{}, second{}, third{};
  bool got_first = false, got_second = false, got_third = false;
};

PairOptions small_pair() {
  PairOptions o;
  o.mem = kMem;
  o.timeout = 10;  // bounded, should a NAK be lost
  o.retry_cnt = 1;
  return o;
}

// The set-up of the parameterised tests: a small pair, B's buffer filled with 0x3C and B's
// frames captured.
template <class Param>
class WatchedPair : public ::testing::TestWithParam<Param> {
 protected:
  WatchedPair() { watch_b(pr, cap); }
  Pair pr{small_pair()};
  Endpoint& a = pr.a;
  Endpoint& b = pr.b;
  Capture cap;
};

// Runs one bad request from A to B followed by two good WRITEs (one unsignaled), checks the
// common outcome and returns the NAKs B emitted.
class AccessTest : public WatchedPair<std::tuple<Op, Violation>> {};

// Posts `op` against (va, rkey, len), local side in `local` (an MR of A with local write).
// A's WR 1 (an `opc`) ended in REM_INV_REQ_ERR and WR 2 behind it was flushed, both QPs are
// in ERR, and B sent one NAK, Invalid Request: `naks` (for the caller to check its PSN).
void expect_invalid_request(Pair& pr, const Capture& cap, WcOpcode opc, std::vector<proto::Packet>& naks) {
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(pr.a.scq, wc, 1u, WcStatus::RemInvReqErr, 100'000'000));
  EXPECT_EQ(wc.opcode, opc);
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(pr.a.scq, wc, 2u, WcStatus::WrFlushErr, 1'000'000));
  pr.run_until([] { return false; }, 1'000'000);
  EXPECT_EQ(pr.a.qp->state(), QpState::Err);
  EXPECT_EQ(pr.b.qp->state(), QpState::Err);
  naks = cap.naks();
  ASSERT_EQ(naks.size(), 1u);
  EXPECT_EQ(naks[0].aeth.syndrome, kNakInvalidRequest);
}

int post_op(Pair& pr, Op op, uint64_t wr_id, uint64_t va, uint32_t rkey, uint32_t len, Region& local) {
  SendWr w;
  w.wr_id = wr_id;
  w.send_flags = kSendSignaled;
  Sge sg{local.addr(), is_atomic(op) ? 8u : len, local.mr->lkey};
  w.sg_list = &sg;
  w.num_sge = 1;
  w.remote_addr = va;
  w.rkey = rkey;
  switch (op) {
    case Op::Write: w.opcode = WrOpcode::RdmaWrite; break;
    case Op::Read: w.opcode = WrOpcode::RdmaRead; break;
    case Op::CmpSwap:
      w.opcode = WrOpcode::AtomicCmpSwp;
      w.compare_add = 0x3C3C3C3C3C3C3C3Cull;  // equal to the fill: a swap would happen
      w.swap = 0x1111111111111111ull;
      break;
    case Op::FetchAdd:
      w.opcode = WrOpcode::AtomicFetchAdd;
      w.compare_add = 1;
      break;
  }
  return pr.a.dev->post_send(pr.a.qp, w);
}

TEST_P(AccessTest, NakRemoteAccessErrorBothQpsToErrNothingWritten) {
  auto [op, v] = GetParam();

  // The MR the request goes to: the harness's (canaries around it) unless the violation needs
  // another one.
  std::unique_ptr<Region> other;
  Pd* pd2 = nullptr;
  const uint32_t alen = is_atomic(op) ? 8 : kLen;
  Target t{b.addr() + 64, b.mr->rkey, kLen};
  const uint64_t start = b.addr(), end = b.addr() + b.buf_len();
  switch (v) {
    case Violation::WrongRkey:
      t.rkey = b.mr->rkey + 0x100 * 7;  // a slot nothing is registered in
      break;
    case Violation::WrongKeyByte:
      t.rkey = b.mr->rkey ^ 0x5A;  // the right slot, a wrong key byte
      break;
    case Violation::BelowStart:
      t.va = start - 1;  // right length, one byte before the MR
      break;
    case Violation::PastEnd:
      t.va = end - alen + 1;  // the last byte is one past the MR
      break;
    case Violation::LenOnePastEnd:
      ASSERT_FALSE(is_atomic(op));
      t.va = start;
      t.len = uint32_t(b.buf_len()) + 1;
      break;
    case Violation::AlignedBelow:
      t.va = start - 8;
      ASSERT_EQ(t.va % 8, 0u);
      break;
    case Violation::AlignedPastEnd:
      t.va = end;
      ASSERT_EQ(t.va % 8, 0u);
      break;
    case Violation::NoRight:
      other = std::make_unique<Region>(*b.dev, b.pd, kMem, kAllAccess & ~right_for(op));
      ASSERT_NE(other->mr, nullptr);
      t = {other->addr() + 64, other->mr->rkey, kLen};
      break;
    case Violation::QpNoRight: {
      // The MR allows it, the QP's access flags do not.
      QpAttr at;
      at.qp_state = QpState::Rts;
      at.qp_access_flags = (kRemoteWrite | kRemoteRead | kRemoteAtomic) & ~right_for(op);
      ASSERT_EQ(b.dev->modify_qp(b.qp, at, kAttrState | kAttrAccessFlags), 0);
      break;
    }
    case Violation::OtherPd:
      pd2 = b.dev->alloc_pd();
      other = std::make_unique<Region>(*b.dev, pd2, kMem, kAllAccess);
      ASSERT_NE(other->mr, nullptr);
      t = {other->addr() + 64, other->mr->rkey, kLen};
      break;
    case Violation::Deregistered:
      other = std::make_unique<Region>(*b.dev, b.pd, kMem, kAllAccess);
      ASSERT_NE(other->mr, nullptr);
      t = {other->addr() + 64, other->mr->rkey, kLen};
      ASSERT_EQ(b.dev->dereg_mr(other->mr), 0);
      break;
  }
  const std::vector<uint8_t> b_before = b.mem;
  const std::vector<uint8_t> other_before = other ? other->mem : std::vector<uint8_t>{};

  // A's local buffer, big enough for the longest request, with a known pattern.
  Region local(*a.dev, a.pd, kMem + 64, kLocalWrite, 0xA5);
  ASSERT_NE(local.mr, nullptr);
  const std::vector<uint8_t> local_before = local.mem;
  // B has a receive posted: it is flushed when B goes to ERR.
  Sge brs{b.addr(), 16, b.mr->lkey};
  ASSERT_EQ(b.dev->post_recv(b.qp, RecvWr{0xB1, &brs, 1}), 0);

  const uint32_t first_psn = a.qp->next_send_psn();
  ASSERT_EQ(post_op(pr, op, 1, t.va, t.rkey, t.len, local), 0);
  // Later WRs: a good WRITE (signaled) and an unsignaled one.
  Sge gs{a.addr(), 16, a.mr->lkey};
  SendWr good = signaled_wr(2, &gs, WrOpcode::RdmaWrite);
  good.remote_addr = b.addr() + 2048;
  good.rkey = b.mr->rkey;
  ASSERT_EQ(a.dev->post_send(a.qp, good), 0);
  good.wr_id = 3;
  good.send_flags = 0;
  ASSERT_EQ(a.dev->post_send(a.qp, good), 0);

  Wc wc;
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(a.scq, wc, 1u, WcStatus::RemAccessErr, 100'000'000));
  EXPECT_EQ(wc.opcode, wc_of(op));
  EXPECT_EQ(wc.qp_num, a.qp->qpn());
  EXPECT_EQ(a.qp->state(), QpState::Err);
  for (uint64_t id : {2u, 3u}) {
    ASSERT_NO_FATAL_FAILURE(pr.expect_wc(a.scq, wc, id, WcStatus::WrFlushErr, 1'000'000));
    EXPECT_EQ(wc.opcode, WcOpcode::RdmaWrite);
  }
  // Posted after: flushed at once.
  good.wr_id = 4;
  ASSERT_EQ(a.dev->post_send(a.qp, good), 0);
  ASSERT_EQ(a.scq->poll(&wc, 1), 1u);
  EXPECT_EQ(wc.wr_id, 4u);
  EXPECT_EQ(wc.status, WcStatus::WrFlushErr);

  pr.run_until([] { return false; }, 2'000'000);
  EXPECT_EQ(a.scq->size(), 0u) << "extra send completions";
  EXPECT_EQ(b.qp->state(), QpState::Err);
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(b.rcq, wc, 0xB1u, WcStatus::WrFlushErr, 1'000'000));
  EXPECT_EQ(b.rcq->size(), 0u);
  EXPECT_EQ(b.scq->size(), 0u);

  // B emitted exactly one frame: the NAK, like rxe's.
  std::vector<proto::Packet> naks = cap.naks();
  ASSERT_EQ(naks.size(), 1u);
  EXPECT_EQ(cap.frames.size(), 1u) << "B sent more than the NAK";
  const proto::Packet& n = naks[0];
  EXPECT_EQ(n.opcode, proto::op::kAck);
  EXPECT_EQ(n.aeth.syndrome, kNakRemoteAccess);
  EXPECT_EQ(n.psn, first_psn);
  EXPECT_EQ(n.aeth.msn, 0u);
  EXPECT_EQ(n.dest_qp, a.qp->qpn());
  EXPECT_FALSE(n.ack_req);

  // Nothing written: B's MR and canaries, the other region, A's local buffer.
  EXPECT_TRUE(canaries_intact(b));
  EXPECT_TRUE(b.mem == b_before) << "B's memory changed";
  if (other) {
    EXPECT_TRUE(other->canaries_ok());
    EXPECT_TRUE(other->mem == other_before) << "the other region changed";
  }
  EXPECT_TRUE(local.mem == local_before) << "A's local buffer changed";
  EXPECT_TRUE(canaries_intact(a));
}

std::string access_name(const ::testing::TestParamInfo<std::tuple<Op, Violation>>& i) {
  return std::string(op_name(std::get<0>(i.param))) + "_" + violation_name(std::get<1>(i.param));
}

INSTANTIATE_TEST_SUITE_P(AllOpsAllViolations, AccessTest,
                         ::testing::Combine(::testing::ValuesIn(kOps), ::testing::ValuesIn(kViolations)),
                         access_name);
INSTANTIATE_TEST_SUITE_P(WriteReadLength, AccessTest,
                         ::testing::Combine(::testing::Values(Op::Write, Op::Read),
                                            ::testing::ValuesIn(kLengthViolations)),
                         access_name);
INSTANTIATE_TEST_SUITE_P(AtomicsAligned, AccessTest,
                         ::testing::Combine(::testing::Values(Op::CmpSwap, Op::FetchAdd),
                                            ::testing::ValuesIn(kAlignedViolations)),
                         access_name);

// The golden frame: our NAK for a WRITE with a bad rkey has rxe's headers.
TEST(AccessGolden, NakFrameMatchesRxe) {
  std::vector<uint8_t> golden;
  {
    const std::string path = golden_path("rxe/write_nak_rkey.pcap");
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) GTEST_SKIP() << "no " << path;
    uint8_t buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) golden.insert(golden.end(), buf, buf + n);
    std::fclose(f);
  }
  // Classic pcap, little endian: 24-byte header, then 16-byte record headers.
  ASSERT_GE(golden.size(), 24u);
  std::vector<std::vector<uint8_t>> frames;
  for (size_t off = 24; off + 16 <= golden.size();) {
    uint32_t incl;
    std::memcpy(&incl, golden.data() + off + 8, 4);
    off += 16;
    ASSERT_LE(off + incl, golden.size());
    frames.emplace_back(golden.begin() + off, golden.begin() + off + incl);
    off += incl;
  }
  ASSERT_EQ(frames.size(), 2u);
  proto::Packet req, gnak;
  ASSERT_TRUE(proto::parse(frames[0], req).ok());
  ASSERT_TRUE(proto::parse(frames[1], gnak).ok());
  ASSERT_EQ(gnak.opcode, proto::op::kAck);

  Pair pr(small_pair());
  Capture cap;
  cap.attach(pr.wire.b());
  Region local(*pr.a.dev, pr.a.pd, 64, kLocalWrite);
  ASSERT_EQ(post_op(pr, Op::Write, 1, pr.b.addr(), pr.b.mr->rkey ^ 0x77, uint32_t(req.reth.dma_len), local), 0);
  Wc wc;
  ASSERT_TRUE(pr.next_wc(pr.a.scq, wc, 100'000'000));
  EXPECT_EQ(wc.status, WcStatus::RemAccessErr);
  std::vector<proto::Packet> naks = cap.naks();
  ASSERT_EQ(naks.size(), 1u);
  const proto::Packet& n = naks[0];
  EXPECT_EQ(n.opcode, gnak.opcode);
  EXPECT_EQ(n.aeth.syndrome, gnak.aeth.syndrome);
  EXPECT_EQ(n.aeth.msn, gnak.aeth.msn);
  EXPECT_EQ(n.ack_req, gnak.ack_req);
  EXPECT_EQ(n.solicited, gnak.solicited);
  EXPECT_EQ(n.pkey, gnak.pkey);
  EXPECT_EQ(n.payload.size(), gnak.payload.size());
  EXPECT_EQ(cap.frames[0].size(), frames[1].size()) << "frame length";
  // The NAK names the PSN of the request, as rxe's does.
  EXPECT_EQ(gnak.psn, req.psn);
  EXPECT_EQ(n.psn, pr.opt.sq_psn_a);
}

// ---- Misaligned atomics: NAK invalid request -> IBV_WC_REM_INV_REQ_ERR -------------------------

class MisalignedAtomic : public WatchedPair<std::tuple<Op, uint32_t>> {};

TEST_P(MisalignedAtomic, NakInvalidRequest) {
  auto [op, mis] = GetParam();
  const std::vector<uint8_t> b_before = b.mem;
  Region local(*a.dev, a.pd, 64, kLocalWrite, 0xA5);
  const std::vector<uint8_t> local_before = local.mem;
  ASSERT_EQ(post_op(pr, op, 1, b.addr() + 64 + mis, b.mr->rkey, 8, local), 0);
  Sge gs{a.addr(), 16, a.mr->lkey};
  SendWr good;
  good.wr_id = 2;
  good.opcode = WrOpcode::RdmaWrite;
  good.sg_list = &gs;
  good.num_sge = 1;
  good.remote_addr = b.addr();
  good.rkey = b.mr->rkey;
  ASSERT_EQ(a.dev->post_send(a.qp, good), 0);
  std::vector<proto::Packet> naks;
  ASSERT_NO_FATAL_FAILURE(expect_invalid_request(pr, cap, wc_of(op), naks));
  EXPECT_EQ(naks[0].psn, pr.opt.sq_psn_a);
  EXPECT_TRUE(b.mem == b_before);
  EXPECT_TRUE(local.mem == local_before);
}

INSTANTIATE_TEST_SUITE_P(Atomics, MisalignedAtomic,
                         ::testing::Combine(::testing::Values(Op::CmpSwap, Op::FetchAdd),
                                            ::testing::Values(1u, 4u, 7u)),
                         [](const auto& i) {
                           return std::string(op_name(std::get<0>(i.param))) + "_plus" +
                                  std::to_string(std::get<1>(i.param));
                         });

// ---- The bounds are inclusive of the MR's own first and last bytes -----------------------------

TEST(AccessBounds, WholeMrAndEdgesAreAllowed) {
  Pair pr(small_pair());
  Endpoint& a = pr.a;
  Endpoint& b = pr.b;
  Region local(*a.dev, a.pd, kMem, kLocalWrite);
  fill_pattern(local.buf(), kMem, 3);
  // The whole MR, the first and the last byte, the first and the last aligned 8 bytes.
  ASSERT_EQ(post_op(pr, Op::Write, 1, b.addr(), b.mr->rkey, uint32_t(b.buf_len()), local), 0);
  ASSERT_EQ(post_op(pr, Op::Read, 2, b.addr() + b.buf_len() - 1, b.mr->rkey, 1, local), 0);
  ASSERT_EQ(post_op(pr, Op::FetchAdd, 3, b.addr(), b.mr->rkey, 8, local), 0);
  ASSERT_EQ(post_op(pr, Op::FetchAdd, 4, b.addr() + b.buf_len() - 8, b.mr->rkey, 8, local), 0);
  for (uint64_t id = 1; id <= 4; ++id) {
    Wc wc;
    ASSERT_NO_FATAL_FAILURE(pr.expect_wc(a.scq, wc, id, WcStatus::Success));
  }
  EXPECT_TRUE(canaries_intact(b));
  EXPECT_EQ(b.qp->state(), QpState::Rts);
}

// C9-88: a zero-length READ or WRITE need not carry a valid address or R_Key.
TEST(AccessBounds, ZeroLengthNeedsNoValidRkey) {
  Pair pr(small_pair());
  Region local(*pr.a.dev, pr.a.pd, 64, kLocalWrite);
  ASSERT_EQ(post_op(pr, Op::Write, 1, 0xDEAD0000, 0x12345, 0, local), 0);
  ASSERT_EQ(post_op(pr, Op::Read, 2, 0xDEAD0000, 0x12345, 0, local), 0);
  for (uint64_t id = 1; id <= 2; ++id) {
    Wc wc;
    ASSERT_NO_FATAL_FAILURE(pr.expect_wc(pr.a.scq, wc, id, WcStatus::Success));
  }
  EXPECT_TRUE(canaries_intact(pr.b));
  EXPECT_EQ(pr.b.qp->state(), QpState::Rts);
}

// ---- Re-registration (ibv_rereg_mr): the same keys, new rights or range at once -----------------

bool all_bytes(const uint8_t* p, size_t n, uint8_t v) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != v) return false;
  return true;
}

TEST(Rereg, RemoteWriteGrantedKeysStay) {
  Pair pr(small_pair());
  Region target(*pr.b.dev, pr.b.pd, 256, kLocalWrite);  // no remote write yet
  const uint32_t lkey = target.mr->lkey, rkey = target.mr->rkey;
  ASSERT_EQ(pr.b.dev->rereg_mr(target.mr, pr.b.pd, target.buf(), 256, target.addr(), kLocalWrite | kRemoteWrite), 0);
  EXPECT_EQ(target.mr->lkey, lkey);
  EXPECT_EQ(target.mr->rkey, rkey);
  Region local(*pr.a.dev, pr.a.pd, 256, kLocalWrite, 0x5A);
  ASSERT_EQ(post_op(pr, Op::Write, 1, target.addr(), rkey, 256, local), 0);
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(pr.a.scq, wc, 1, WcStatus::Success));
  EXPECT_TRUE(all_bytes(target.buf(), 256, 0x5A));
  EXPECT_TRUE(target.canaries_ok());
}

TEST(Rereg, RemoteWriteTakenAwayIsARemoteAccessError) {
  Pair pr(small_pair());
  Region target(*pr.b.dev, pr.b.pd, 256, kLocalWrite | kRemoteWrite);
  ASSERT_EQ(pr.b.dev->rereg_mr(target.mr, pr.b.pd, target.buf(), 256, target.addr(), kLocalWrite), 0);
  Region local(*pr.a.dev, pr.a.pd, 256, kLocalWrite, 0x5A);
  ASSERT_EQ(post_op(pr, Op::Write, 1, target.addr(), target.mr->rkey, 256, local), 0);
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(pr.a.scq, wc, 1, WcStatus::RemAccessErr));
  EXPECT_TRUE(all_bytes(target.buf(), 256, 0x3C)) << "written although the right was taken away";
  EXPECT_TRUE(target.canaries_ok());
}

TEST(Rereg, NewRangeTheOldOneIsOutside) {
  Pair pr(small_pair());
  Region old(*pr.b.dev, pr.b.pd, 256, kLocalWrite | kRemoteWrite);
  Region other(*pr.b.dev, pr.b.pd, 256, kLocalWrite);  // its own MR plays no part
  const uint32_t rkey = old.mr->rkey;
  ASSERT_EQ(pr.b.dev->rereg_mr(old.mr, pr.b.pd, other.buf(), 256, other.addr(), kLocalWrite | kRemoteWrite), 0);
  Region local(*pr.a.dev, pr.a.pd, 256, kLocalWrite, 0x5A);
  ASSERT_EQ(post_op(pr, Op::Write, 1, other.addr(), rkey, 256, local), 0);
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(pr.a.scq, wc, 1, WcStatus::Success));
  EXPECT_TRUE(all_bytes(other.buf(), 256, 0x5A));
  // The old range is not the MR's any more.
  ASSERT_EQ(post_op(pr, Op::Write, 2, old.addr(), rkey, 256, local), 0);
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(pr.a.scq, wc, 2, WcStatus::RemAccessErr));
  EXPECT_TRUE(all_bytes(old.buf(), 256, 0x3C));
  EXPECT_TRUE(old.canaries_ok() && other.canaries_ok());
}

TEST(Rereg, RefusedChangesNothing) {
  Pair pr(small_pair());
  Region target(*pr.b.dev, pr.b.pd, 256, kLocalWrite | kRemoteRead);
  const Mr before = *target.mr;
  // Remote write without local write; an unmapped range; no PD.
  EXPECT_EQ(pr.b.dev->rereg_mr(target.mr, pr.b.pd, target.buf(), 256, target.addr(), kRemoteWrite), EINVAL);
  EXPECT_EQ(pr.b.dev->rereg_mr(target.mr, pr.b.pd, reinterpret_cast<void*>(uintptr_t(0x1000)), 4096, 0x1000,
                               kLocalWrite),
            EFAULT);
  EXPECT_EQ(pr.b.dev->rereg_mr(target.mr, nullptr, target.buf(), 256, target.addr(), kLocalWrite), EINVAL);
  EXPECT_EQ(target.mr->access, before.access);
  EXPECT_EQ(target.mr->host, before.host);
  EXPECT_EQ(target.mr->rkey, before.rkey);
  // A deregistered MR cannot be re-registered.
  Mr* m = target.mr;
  ASSERT_EQ(pr.b.dev->dereg_mr(m), 0);
  EXPECT_EQ(pr.b.dev->rereg_mr(m, pr.b.pd, target.buf(), 256, target.addr(), kLocalWrite), EINVAL);
  target.mr = nullptr;
}

// ---- Local errors -----------------------------------------------------------------------------

TEST(LocalErrors, SendWithBadLkeyIsLocProtErr) {
  struct Case {
    const char* what;
    WrOpcode op;
    int bad;  // 0: unknown lkey, 1: out of the MR, 2: MR of another PD, 3: READ into read-only MR
  };
  const Case cases[] = {
      {"SEND unknown lkey", WrOpcode::Send, 0},
      {"WRITE unknown lkey", WrOpcode::RdmaWrite, 0},
      {"SEND past the MR", WrOpcode::Send, 1},
      {"SEND with another PD's MR", WrOpcode::Send, 2},
      {"READ into an MR without local write", WrOpcode::RdmaRead, 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Pair pr(small_pair());
    Endpoint& a = pr.a;
    Capture cap;
    cap.attach(pr.wire.a());
    Sge rs{pr.b.addr(), 256, pr.b.mr->lkey};
    ASSERT_EQ(pr.b.dev->post_recv(pr.b.qp, RecvWr{9, &rs, 1}), 0);
    std::unique_ptr<Region> other;
    Sge sg{a.addr(), 32, a.mr->lkey ^ 0x3300};
    if (c.bad == 1) sg = {a.addr() + a.buf_len() - 16, 32, a.mr->lkey};
    if (c.bad == 2) {
      other = std::make_unique<Region>(*a.dev, a.dev->alloc_pd(), 64, kLocalWrite);
      sg = {other->addr(), 32, other->mr->lkey};
    }
    if (c.bad == 3) {
      other = std::make_unique<Region>(*a.dev, a.pd, 64, 0);
      sg = {other->addr(), 32, other->mr->lkey};
    }
    SendWr w = signaled_wr(1, &sg, c.op);
    w.remote_addr = pr.b.addr();
    w.rkey = pr.b.mr->rkey;
    ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
    Sge gs{a.addr(), 8, a.mr->lkey};
    SendWr later = w;
    later.wr_id = 2;
    later.opcode = WrOpcode::RdmaWrite;
    later.send_flags = 0;
    later.sg_list = &gs;
    ASSERT_EQ(a.dev->post_send(a.qp, later), 0);
    Wc wc;
    ASSERT_NO_FATAL_FAILURE(pr.expect_wc(a.scq, wc, 1u, WcStatus::LocProtErr, 100'000'000));
    ASSERT_NO_FATAL_FAILURE(pr.expect_wc(a.scq, wc, 2u, WcStatus::WrFlushErr, 1'000'000));
    EXPECT_EQ(a.qp->state(), QpState::Err);
    pr.run_until([] { return false; }, 1'000'000);
    EXPECT_TRUE(cap.frames.empty()) << "A sent " << cap.frames.size() << " frames";
    EXPECT_EQ(pr.b.rcq->size(), 0u);
    EXPECT_EQ(pr.b.qp->state(), QpState::Rts);
  }
}

TEST(LocalErrors, SendLargerThanReceiveBuffer) {
  struct Case {
    Mtu mtu;
    uint32_t recv_len, send_len;
  };
  const Case cases[] = {
      {Mtu::M1024, 16, 17},      // one byte too many, single packet
      {Mtu::M1024, 0, 1},        // a receive with no buffer at all
      {Mtu::M256, 300, 512},     // the second packet does not fit
      {Mtu::M256, 600, 1000},    // the last of four packets does not fit
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("recv " + std::to_string(c.recv_len) + " send " + std::to_string(c.send_len));
    PairOptions o = small_pair();
    o.mtu = c.mtu;
    Pair pr(o);
    Endpoint& a = pr.a;
    Endpoint& b = pr.b;
    Capture cap;
    watch_b(pr, cap);
    fill_pattern(a.buf(), c.send_len, 6);
    Sge rs{b.addr(), c.recv_len, b.mr->lkey};
    ASSERT_EQ(b.dev->post_recv(b.qp, RecvWr{0xB0, &rs, c.recv_len ? 1u : 0u}), 0);
    ASSERT_EQ(b.dev->post_recv(b.qp, RecvWr{0xB1, &rs, 1}), 0);
    Sge sg{a.addr(), c.send_len, a.mr->lkey};
    SendWr w = signaled_wr(1, &sg);
    ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
    w.wr_id = 2;
    ASSERT_EQ(a.dev->post_send(a.qp, w), 0);

    Wc wc;
    ASSERT_NO_FATAL_FAILURE(pr.expect_wc(b.rcq, wc, 0xB0u, WcStatus::LocLenErr, 100'000'000));
    EXPECT_EQ(wc.opcode, WcOpcode::Recv);
    ASSERT_NO_FATAL_FAILURE(pr.expect_wc(b.rcq, wc, 0xB1u, WcStatus::WrFlushErr, 1'000'000));
    std::vector<proto::Packet> naks;
    ASSERT_NO_FATAL_FAILURE(expect_invalid_request(pr, cap, WcOpcode::Send, naks));
    // The NAK names the packet that did not fit.
    const uint32_t m = mtu_bytes(c.mtu);
    EXPECT_EQ(naks[0].psn, pr.opt.sq_psn_a + c.recv_len / m);
    // Nothing past the receive buffer was written.
    for (size_t i = c.recv_len; i < b.buf_len(); ++i) ASSERT_EQ(b.buf()[i], 0x3C) << "byte " << i;
    EXPECT_TRUE(canaries_intact(b));
  }
}

TEST(LocalErrors, ReceiveSgeWithBadLkey) {
  // The receiver cannot place the SEND: local protection error there, NAK remote operational
  // error (0x63) to the sender, as rxe does.
  Pair pr(small_pair());
  Endpoint& a = pr.a;
  Endpoint& b = pr.b;
  Capture cap;
  watch_b(pr, cap);
  Sge rs{b.addr(), 256, b.mr->lkey ^ 0x4400};
  ASSERT_EQ(b.dev->post_recv(b.qp, RecvWr{0xB0, &rs, 1}), 0);
  Sge sg{a.addr(), 100, a.mr->lkey};
  SendWr w = signaled_wr(1, &sg);
  ASSERT_EQ(a.dev->post_send(a.qp, w), 0);
  Wc wc;
  ASSERT_NO_FATAL_FAILURE(pr.expect_wc(b.rcq, wc, 0xB0u, WcStatus::LocProtErr, 100'000'000));
  ASSERT_TRUE(pr.next_wc(a.scq, wc, 100'000'000));
  EXPECT_EQ(wc.status, WcStatus::RemOpErr) << wc_status_name(wc.status);
  std::vector<proto::Packet> naks = cap.naks();
  ASSERT_EQ(naks.size(), 1u);
  EXPECT_EQ(naks[0].aeth.syndrome, kNakRemoteOp);
  EXPECT_EQ(a.qp->state(), QpState::Err);
  EXPECT_EQ(b.qp->state(), QpState::Err);
  for (size_t i = 0; i < b.buf_len(); ++i) ASSERT_EQ(b.buf()[i], 0x3C) << i;
  EXPECT_TRUE(canaries_intact(b));
}

}  // namespace
}  // namespace uroce::test
