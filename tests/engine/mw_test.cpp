// Memory windows (IBA 10.6.7; engine/local_ops.cpp): type 1 and type 2 (2B) windows bound and
// invalidated by work requests on B's send queue, A's WRITEs, READs and atomics through the
// window's R_Key, the window's bounds and rights, remote invalidation by SEND with Invalidate,
// local invalidation, and every rule the spec names for a bind, an invalidation and a
// deregistration, each with the completion status it gives.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "tests/support/harness.hpp"

namespace uroce::test {
namespace {

constexpr uint32_t kRw = kRemoteRead | kRemoteWrite;

PairOptions mw_options() {
  PairOptions o;
  o.mem = 1 << 16;
  o.access = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic | kMwBind;
  return o;
}

// BIND_MW on `qp` of B: window `mw` over [off, off + len) of B's buffer with `access`, R_Key
// `rkey` (its index part the window's).
SendWr bind_wr(Pair& pr, const Mw* mw, uint32_t rkey, uint64_t off, uint64_t len, uint32_t access, uint64_t id,
               uint32_t lkey = 0) {
  SendWr w;
  w.wr_id = id;
  w.opcode = WrOpcode::BindMw;
  w.send_flags = kSendSignaled;
  w.invalidate_rkey = mw->rkey;
  w.rkey = rkey;
  w.remote_addr = pr.b.addr() + off;
  w.compare_add = len;
  w.swap = uint64_t(lkey ? lkey : pr.b.mr->lkey) | uint64_t(access) << 32;
  return w;
}

uint32_t next_key(uint32_t rkey) { return (rkey & ~0xFFu) | ((rkey + 1) & 0xFF); }

class Windows : public ::testing::Test {
 protected:
  void SetUp() override {
    pr = std::make_unique<Pair>(mw_options());
    fill_pattern(pr->a.buf(), 4096, 3);
  }
  // Binds on B's QP and waits for the completion; its status.
  WcStatus bind(const Mw* mw, uint32_t rkey, uint64_t off, uint64_t len, uint32_t access, Qp* qp = nullptr) {
    EXPECT_EQ(pr->b.dev->post_send(qp ? qp : pr->b.qp, bind_wr(*pr, mw, rkey, off, len, access, 900)), 0);
    Wc wc;
    EXPECT_TRUE(pr->next_wc(pr->b.scq, wc));
    if (wc.status == WcStatus::Success) {
      EXPECT_EQ(wc.opcode, WcOpcode::BindMw);
    }
    return wc.status;
  }
  // A's WRITE of `len` bytes (from its buffer) or READ (into its buffer at 8192) of B's buffer at
  // `off` with `rkey`; its completion status.
  WcStatus rdma(WrOpcode op, uint32_t rkey, uint64_t off, uint32_t len) {
    Sge s{pr->a.addr() + (op == WrOpcode::RdmaRead ? 8192 : 0), len, pr->a.mr->lkey};
    SendWr w = signaled_wr(1, &s, op);
    w.remote_addr = pr->b.addr() + off;
    w.rkey = rkey;
    EXPECT_EQ(pr->a.dev->post_send(pr->a.qp, w), 0);
    Wc wc;
    EXPECT_TRUE(pr->next_wc(pr->a.scq, wc));
    return wc.status;
  }
  WcStatus write(uint32_t rkey, uint64_t off, uint32_t len) { return rdma(WrOpcode::RdmaWrite, rkey, off, len); }
  WcStatus read(uint32_t rkey, uint64_t off, uint32_t len) { return rdma(WrOpcode::RdmaRead, rkey, off, len); }
  // A SEND with Invalidate of `rkey` into a receive posted on B; A's status, B's completion.
  WcStatus send_inv(uint32_t rkey, Wc& rwc) {
    Sge r{pr->b.addr() + 32768, 256, pr->b.mr->lkey};
    RecvWr rw{55, &r, 1};
    EXPECT_EQ(pr->b.dev->post_recv(pr->b.qp, rw), 0);
    Sge s{pr->a.addr(), 64, pr->a.mr->lkey};
    SendWr w = signaled_wr(3, &s, WrOpcode::SendWithInv);
    w.invalidate_rkey = rkey;
    EXPECT_EQ(pr->a.dev->post_send(pr->a.qp, w), 0);
    Wc wc;
    EXPECT_TRUE(pr->next_wc(pr->a.scq, wc));
    EXPECT_TRUE(pr->next_wc(pr->b.rcq, rwc));
    return wc.status;
  }
  std::unique_ptr<Pair> pr;
};

TEST_F(Windows, AType2WindowOpensItsRangeWithItsRightsAndNothingElse) {
  Mw* mw = pr->b.dev->alloc_mw(pr->b.pd, 2);
  ASSERT_NE(mw, nullptr);
  EXPECT_TRUE(is_mw_key(mw->rkey));
  EXPECT_FALSE(is_mw_key(pr->b.mr->rkey)) << "an MR's key never looks like a window's";
  const uint32_t k2 = next_key(mw->rkey);
  ASSERT_EQ(bind(mw, k2, 1024, 2048, kRw), WcStatus::Success);
  EXPECT_EQ(mw->rkey, k2);
  EXPECT_EQ(pr->b.mr->windows, 1u);
  EXPECT_EQ(write(k2, 1024, 2048), WcStatus::Success);
  EXPECT_EQ(std::memcmp(pr->b.buf() + 1024, pr->a.buf(), 2048), 0);
  EXPECT_EQ(read(k2, 2000, 1000), WcStatus::Success);
  EXPECT_EQ(std::memcmp(pr->a.buf() + 8192, pr->b.buf() + 2000, 1000), 0);
  EXPECT_EQ(write(k2, 1024 + 2048 - 8, 16), WcStatus::RemAccessErr) << "past the window's end (inside the MR)";
  EXPECT_EQ(pr->b.qp->state(), QpState::Err);
}

TEST_F(Windows, AnUnboundWindowOpensNothing) {
  Mw* mw = pr->b.dev->alloc_mw(pr->b.pd, 2);
  ASSERT_NE(mw, nullptr);
  EXPECT_EQ(write(mw->rkey, 0, 64), WcStatus::RemAccessErr);
  EXPECT_EQ(pr->b.qp->counters().other_naks_sent, 1u);
}

TEST_F(Windows, RightsTheWindowDoesNotGrantAreRefused) {
  Mw* mw = pr->b.dev->alloc_mw(pr->b.pd, 2);
  const uint32_t k = next_key(mw->rkey);
  ASSERT_EQ(bind(mw, k, 0, 4096, kRemoteRead), WcStatus::Success);
  EXPECT_EQ(read(k, 0, 64), WcStatus::Success);
  std::memset(pr->b.buf(), 0x11, 64);
  EXPECT_EQ(write(k, 0, 64), WcStatus::RemAccessErr) << "a read-only window";
  for (int i = 0; i < 64; ++i) ASSERT_EQ(pr->b.buf()[i], 0x11);
}

TEST_F(Windows, AType2WindowAnswersOnlyTheQpThatBoundIt) {
  // Another QP of B (not connected to A) binds the window: A's requests, on B's first QP, may
  // not use it (type 2B).
  Qp* other = pr->b.dev->create_qp(pr->b.init_attr(QpType::RC));
  ASSERT_NE(other, nullptr);
  ASSERT_EQ(connect_qp(*pr->b.dev, other, *pr->a.dev, *pr->a.qp, pr->path(1, 0)), 0);
  Mw* mw = pr->b.dev->alloc_mw(pr->b.pd, 2);
  const uint32_t k = next_key(mw->rkey);
  ASSERT_EQ(bind(mw, k, 0, 4096, kRw, other), WcStatus::Success);
  EXPECT_EQ(write(k, 0, 64), WcStatus::RemAccessErr);
}

TEST_F(Windows, SendWithInvalidateEndsTheWindowAndTheKeyWithIt) {
  Mw* mw = pr->b.dev->alloc_mw(pr->b.pd, 2);
  const uint32_t k = next_key(mw->rkey);
  ASSERT_EQ(bind(mw, k, 0, 4096, kRw), WcStatus::Success);
  EXPECT_EQ(write(k, 0, 64), WcStatus::Success);
  Wc rwc;
  EXPECT_EQ(send_inv(k, rwc), WcStatus::Success);
  EXPECT_EQ(rwc.status, WcStatus::Success);
  EXPECT_TRUE(rwc.wc_flags & kWcWithInv);
  EXPECT_EQ(rwc.invalidated_rkey, k);
  EXPECT_FALSE(mw->bound);
  EXPECT_EQ(pr->b.mr->windows, 0u);
  EXPECT_EQ(write(k, 0, 64), WcStatus::RemAccessErr) << "invalidated";
}

TEST_F(Windows, SendWithInvalidateOfAKeyThatIsNoBoundType2WindowIsAnInvalidRequest) {
  Wc rwc;
  EXPECT_EQ(send_inv(pr->b.mr->rkey, rwc), WcStatus::RemInvReqErr) << "an MR's key cannot be invalidated";
  EXPECT_EQ(rwc.status, WcStatus::RemInvReqErr);
  EXPECT_EQ(rwc.wr_id, 55u);
  EXPECT_EQ(pr->b.qp->state(), QpState::Err);
  EXPECT_TRUE(pr->b.mr->valid) << "the MR is untouched";
}

TEST_F(Windows, LocalInvalidateEndsAType2WindowAndAType1CannotBeInvalidated) {
  Mw* mw = pr->b.dev->alloc_mw(pr->b.pd, 2);
  const uint32_t k = next_key(mw->rkey);
  ASSERT_EQ(bind(mw, k, 0, 4096, kRw), WcStatus::Success);
  SendWr inv;
  inv.wr_id = 901;
  inv.opcode = WrOpcode::LocalInv;
  inv.send_flags = kSendSignaled;
  inv.invalidate_rkey = k;
  ASSERT_EQ(pr->b.dev->post_send(pr->b.qp, inv), 0);
  Wc wc;
  ASSERT_TRUE(pr->next_wc(pr->b.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(wc.opcode, WcOpcode::LocalInv);
  EXPECT_EQ(write(k, 0, 64), WcStatus::RemAccessErr);

  Pair p2(mw_options());
  Mw* t1 = p2.b.dev->alloc_mw(p2.b.pd, 1);
  ASSERT_EQ(p2.b.dev->post_send(p2.b.qp, bind_wr(p2, t1, next_key(t1->rkey), 0, 4096, kRw, 7)), 0);
  ASSERT_TRUE(p2.next_wc(p2.b.scq, wc));
  ASSERT_EQ(wc.status, WcStatus::Success);
  inv.invalidate_rkey = t1->rkey;
  ASSERT_EQ(p2.b.dev->post_send(p2.b.qp, inv), 0);
  ASSERT_TRUE(p2.next_wc(p2.b.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::LocQpOpErr) << "o10-37.2.26";
  EXPECT_TRUE(t1->bound);
}

TEST_F(Windows, AType1WindowBindsAgainWhileBoundAndTheOldKeyNamesNothing) {
  Mw* mw = pr->b.dev->alloc_mw(pr->b.pd, 1);
  const uint32_t k1 = next_key(mw->rkey);
  ASSERT_EQ(bind(mw, k1, 0, 1024, kRw), WcStatus::Success);
  EXPECT_EQ(write(k1, 0, 64), WcStatus::Success);
  const uint32_t k2 = next_key(k1);
  ASSERT_EQ(bind(mw, k2, 2048, 1024, kRw), WcStatus::Success) << "a type 1 window binds again while bound";
  EXPECT_EQ(pr->b.mr->windows, 1u);
  EXPECT_EQ(write(k2, 2048, 64), WcStatus::Success);
  EXPECT_EQ(write(k1, 2048, 64), WcStatus::RemAccessErr) << "the old key names nothing";
}

// What a bind may not do (IBA C10-72..75, o10-37.2.30, o10-37.2.40): MW_BIND_ERR, and the QP goes
// to ERR.
struct BadBind {
  const char* what;
  uint8_t type;
  uint32_t mr_access;  // B's MR
  uint64_t off, len;
  uint32_t access;
  bool twice;          // bind once (successfully) first
  bool other_index;    // a new R_Key with another window's index
};
void PrintTo(const BadBind& b, std::ostream* os) { *os << b.what; }

class Binds : public ::testing::TestWithParam<BadBind> {};

TEST_P(Binds, FailWithMwBindErr) {
  const BadBind& b = GetParam();
  PairOptions o = mw_options();
  o.access = b.mr_access;
  Pair pr(o);
  Mw* mw = pr.b.dev->alloc_mw(pr.b.pd, b.type);
  ASSERT_NE(mw, nullptr);
  Wc wc;
  uint32_t k = next_key(mw->rkey);
  if (b.twice) {
    ASSERT_EQ(pr.b.dev->post_send(pr.b.qp, bind_wr(pr, mw, k, 0, 64, kRw, 1)), 0);
    ASSERT_TRUE(pr.next_wc(pr.b.scq, wc));
    ASSERT_EQ(wc.status, WcStatus::Success);
    k = next_key(k);
  }
  if (b.other_index) k ^= 0x100;
  ASSERT_EQ(pr.b.dev->post_send(pr.b.qp, bind_wr(pr, mw, k, b.off, b.len, b.access, 2)), 0);
  ASSERT_TRUE(pr.next_wc(pr.b.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::MwBindErr);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(pr.b.qp->state(), QpState::Err);
}

constexpr uint32_t kMrAll = kLocalWrite | kRemoteWrite | kRemoteRead | kMwBind;
INSTANTIATE_TEST_SUITE_P(
    Mw, Binds,
    ::testing::Values(BadBind{"MR without MW_BIND (C10-73)", 2, kLocalWrite | kRemoteRead, 0, 64, kRemoteRead, false, false},
                      BadBind{"writable window, MR without local write (C10-74)", 2, kRemoteRead | kMwBind, 0, 64, kRw,
                              false, false},
                      BadBind{"window past the MR (C10-75)", 2, kMrAll, (1 << 16) - 32, 64, kRw, false, false},
                      BadBind{"type 2 bound again (o10-37.2.30)", 2, kMrAll, 0, 64, kRw, true, false},
                      BadBind{"type 2 with length 0 (o10-37.2.40)", 2, kMrAll, 0, 0, kRw, false, false},
                      BadBind{"zero-based window", 2, kMrAll, 0, 64, kRw | kZeroBased, false, false},
                      BadBind{"a key of another window", 1, kMrAll, 0, 64, kRw, false, true}),
    [](const auto& info) {
      std::string n = info.param.what;
      for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return n;
    });

TEST(MwRules, ABoundMrIsNotDeregisteredAndFreeingTheWindowReleasesIt) {
  Pair pr(mw_options());
  Mw* mw = pr.b.dev->alloc_mw(pr.b.pd, 2);
  ASSERT_EQ(pr.b.dev->post_send(pr.b.qp, bind_wr(pr, mw, next_key(mw->rkey), 0, 64, kRw, 1)), 0);
  Wc wc;
  ASSERT_TRUE(pr.next_wc(pr.b.scq, wc));
  ASSERT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(pr.b.dev->dereg_mr(pr.b.mr), EBUSY);
  EXPECT_EQ(pr.b.dev->rereg_mr(pr.b.mr, pr.b.pd, pr.b.buf(), 64, pr.b.addr(), kMrAll), EBUSY);
  EXPECT_EQ(pr.b.dev->dealloc_mw(mw), 0);
  EXPECT_EQ(pr.b.mr->windows, 0u);
  EXPECT_EQ(pr.b.dev->dealloc_mw(mw), EINVAL) << "freed already";
  EXPECT_EQ(pr.b.dev->alloc_mw(pr.b.pd, 3), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST(MwRules, ABindCompletesInOrderBehindWorkStillOutstanding) {
  Pair pr(mw_options());
  Mw* mw = pr.b.dev->alloc_mw(pr.b.pd, 2);
  // B writes to A (outstanding until A's ACK), then binds: the bind's completion comes second.
  Sge s{pr.b.addr(), 64, pr.b.mr->lkey};
  SendWr w = signaled_wr(10, &s, WrOpcode::RdmaWrite);
  w.remote_addr = pr.a.addr();
  w.rkey = pr.a.mr->rkey;
  ASSERT_EQ(pr.b.dev->post_send(pr.b.qp, w), 0);
  ASSERT_EQ(pr.b.dev->post_send(pr.b.qp, bind_wr(pr, mw, next_key(mw->rkey), 0, 64, kRw, 11)), 0);
  Wc wc;
  ASSERT_TRUE(pr.next_wc(pr.b.scq, wc));
  EXPECT_EQ(wc.wr_id, 10u);
  EXPECT_EQ(wc.opcode, WcOpcode::RdmaWrite);
  ASSERT_TRUE(pr.next_wc(pr.b.scq, wc));
  EXPECT_EQ(wc.wr_id, 11u);
  EXPECT_EQ(wc.opcode, WcOpcode::BindMw);
  EXPECT_EQ(wc.status, WcStatus::Success);
  // Neither needs a wire packet of its own: no PSN was taken by the bind.
  EXPECT_EQ(pr.b.qp->counters().sent_pkts, 1u);
}

TEST(MwRules, PostSendTakesBindAndInvalidateOnRcAndUcOnly) {
  PairOptions o = mw_options();
  o.qp_type = QpType::UD;
  Pair pr(o);
  Mw* mw = pr.b.dev->alloc_mw(pr.b.pd, 2);
  EXPECT_EQ(pr.b.dev->post_send(pr.b.qp, bind_wr(pr, mw, next_key(mw->rkey), 0, 64, kRw, 1)), EINVAL);
  SendWr inv;
  inv.opcode = WrOpcode::LocalInv;
  inv.invalidate_rkey = mw->rkey;
  EXPECT_EQ(pr.b.dev->post_send(pr.b.qp, inv), EINVAL);
}

}  // namespace
}  // namespace uroce::test
