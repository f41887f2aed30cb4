// On-demand paging (IBV_ACCESS_ON_DEMAND, explicit and implicit; engine/pages.hpp): a registration
// that checks no pages, accesses that fault pages in (for writing when they store), and the
// failed fault an RNIC reports for pages that are not mapped or not writable: a NAK and
// IBV_WC_REM_ACCESS_ERR for a remote access, IBV_WC_LOC_PROT_ERR for a local one, never a
// signal. Then the registration rules and ibv_advise_mr's prefetch (Device::advise_mr).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tests/support/harness.hpp"

namespace uroce::test {
namespace {

constexpr uint32_t kOdpAll = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic | kOnDemand;
const size_t kPage = size_t(sysconf(_SC_PAGESIZE));

// Anonymous pages this test maps and unmaps; never touched before the engine touches them.
struct Pages {
  explicit Pages(size_t n) : len(n * kPage) {
    void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(m, MAP_FAILED);
    p = static_cast<uint8_t*>(m);
  }
  ~Pages() {
    if (p) munmap(p, len);
  }
  uint64_t addr(size_t off = 0) const { return reinterpret_cast<uintptr_t>(p) + off; }
  bool resident(size_t page) const {
    unsigned char v = 0;
    return mincore(p + page * kPage, kPage, &v) == 0 && (v & 1);
  }
  uint8_t* p = nullptr;
  size_t len;
};

// A's `op` of `len` bytes between its own buffer (offset 0; 8192 for READ's destination) and
// B's address `raddr` with `rkey`; A's completion status.
WcStatus rdma(Pair& pr, WrOpcode op, uint64_t raddr, uint32_t rkey, uint32_t len) {
  Sge s{pr.a.addr() + (op == WrOpcode::RdmaRead ? 8192 : 0), len, pr.a.mr->lkey};
  SendWr w = signaled_wr(7, &s, op);
  w.remote_addr = raddr;
  w.rkey = rkey;
  EXPECT_EQ(pr.a.dev->post_send(pr.a.qp, w), 0);
  Wc wc;
  EXPECT_TRUE(pr.next_wc(pr.a.scq, wc));
  return wc.status;
}

// The next completion on `cq`: work request `id`, with `status`.
void expect_completion(Pair& pr, Cq* cq, uint64_t id, WcStatus status) {
  Wc wc;
  ASSERT_TRUE(pr.next_wc(cq, wc));
  EXPECT_EQ(wc.wr_id, id);
  EXPECT_EQ(wc.status, status);
}

TEST(Odp, AWriteFaultsInPagesNothingHadTouched) {
  Pair pr;
  Pages pg(4);
  Mr* mr = pr.b.dev->reg_mr(pr.b.pd, pg.p, pg.len, kOdpAll);
  ASSERT_NE(mr, nullptr);
  EXPECT_FALSE(pg.resident(1)) << "registration faults nothing in";
  fill_pattern(pr.a.buf(), 3000, 5);
  // Across the boundary of pages 1 and 2.
  EXPECT_EQ(rdma(pr, WrOpcode::RdmaWrite, pg.addr(2 * kPage - 1000), mr->rkey, 3000), WcStatus::Success);
  EXPECT_EQ(std::memcmp(pg.p + 2 * kPage - 1000, pr.a.buf(), 3000), 0);
  EXPECT_TRUE(pg.resident(1) && pg.resident(2));
  EXPECT_FALSE(pg.resident(3)) << "only the pages the access needs";
  // And read back through the same key.
  EXPECT_EQ(rdma(pr, WrOpcode::RdmaRead, pg.addr(2 * kPage - 1000), mr->rkey, 3000), WcStatus::Success);
  EXPECT_EQ(std::memcmp(pr.a.buf() + 8192, pr.a.buf(), 3000), 0);
}

TEST(Odp, AWriteToAPageNoLongerMappedIsARemoteAccessError) {
  Pair pr;
  Pages pg(4);
  Mr* mr = pr.b.dev->reg_mr(pr.b.pd, pg.p, pg.len, kOdpAll);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(munmap(pg.p + 2 * kPage, kPage), 0);
  std::vector<std::vector<uint8_t>> from_b;
  pr.wire.b().tap = [&](const uint8_t* d, uint32_t n) { from_b.emplace_back(d, d + n); };
  EXPECT_EQ(rdma(pr, WrOpcode::RdmaWrite, pg.addr(2 * kPage + 8), mr->rkey, 64), WcStatus::RemAccessErr);
  ASSERT_FALSE(from_b.empty());
  proto::Packet nak;
  ASSERT_TRUE(proto::parse(from_b.back(), nak).ok());
  EXPECT_EQ(nak.opcode, proto::op::kAck);
  EXPECT_EQ(nak.aeth.syndrome, 0x62) << "NAK: remote access error";
  EXPECT_EQ(pr.b.qp->state(), QpState::Err);
}

TEST(Odp, AWriteToAReadOnlyPageIsARemoteAccessErrorAReadOfItIsNot) {
  Pages pg(2);
  std::memset(pg.p + kPage, 0x3C, 256);
  ASSERT_EQ(mprotect(pg.p + kPage, kPage, PROT_READ), 0);
  {
    Pair pr;
    Mr* mr = pr.b.dev->reg_mr(pr.b.pd, pg.p, pg.len, kOdpAll);
    ASSERT_NE(mr, nullptr);
    EXPECT_EQ(rdma(pr, WrOpcode::RdmaRead, pg.addr(kPage), mr->rkey, 256), WcStatus::Success);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(pr.a.buf()[8192 + i], 0x3C) << i;
    EXPECT_EQ(rdma(pr, WrOpcode::RdmaWrite, pg.addr(kPage), mr->rkey, 16), WcStatus::RemAccessErr);
  }
  {
    Pair pr;
    Mr* mr = pr.b.dev->reg_mr(pr.b.pd, pg.p, pg.len, kOdpAll);
    Sge s{pr.a.addr() + 8192, 8, pr.a.mr->lkey};
    SendWr w = signaled_wr(8, &s, WrOpcode::AtomicFetchAdd);
    w.remote_addr = pg.addr(kPage);
    w.rkey = mr->rkey;
    w.compare_add = 1;
    ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, w), 0);
    Wc wc;
    ASSERT_TRUE(pr.next_wc(pr.a.scq, wc));
    EXPECT_EQ(wc.status, WcStatus::RemAccessErr) << "an atomic stores";
  }
  for (int i = 0; i < 256; ++i) ASSERT_EQ(pg.p[kPage + i], 0x3C) << i;
}

TEST(Odp, TheImplicitMrIsTheWholeAddressSpace) {
  Pair pr;
  Mr* all = pr.b.dev->reg_mr(pr.b.pd, nullptr, UINT64_MAX, kOdpAll);
  ASSERT_NE(all, nullptr);
  EXPECT_EQ(all->iova, 0u);
  EXPECT_EQ(all->length, UINT64_MAX);
  Pages pg(2);
  fill_pattern(pr.a.buf(), 512, 9);
  // Any of B's memory, registered or not, by its own address.
  EXPECT_EQ(rdma(pr, WrOpcode::RdmaWrite, pg.addr(100), all->rkey, 512), WcStatus::Success);
  EXPECT_EQ(std::memcmp(pg.p + 100, pr.a.buf(), 512), 0);
  EXPECT_EQ(rdma(pr, WrOpcode::RdmaWrite, pr.b.addr() + 64, all->rkey, 512), WcStatus::Success);
  EXPECT_EQ(std::memcmp(pr.b.buf() + 64, pr.a.buf(), 512), 0);
  EXPECT_TRUE(canaries_intact(pr.b));
  // Page 0 is never mapped.
  EXPECT_EQ(rdma(pr, WrOpcode::RdmaRead, 64, all->rkey, 8), WcStatus::RemAccessErr);
}

TEST(Odp, ALocalBufferThatCannotBeFaultedInIsALocalProtectionError) {
  Pair pr;
  Pages pg(2);
  Mr* mine = pr.a.dev->reg_mr(pr.a.pd, pg.p, pg.len, kOdpAll);
  ASSERT_NE(mine, nullptr);
  std::memset(pg.p, 0x77, 128);
  // Sent from an ODP MR: fine.
  Sge s{pg.addr(), 128, mine->lkey};
  SendWr w = signaled_wr(1, &s, WrOpcode::RdmaWrite);
  w.remote_addr = pr.b.addr();
  w.rkey = pr.b.mr->rkey;
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, w), 0);
  expect_completion(pr, pr.a.scq, 1, WcStatus::Success);
  EXPECT_EQ(pr.b.buf()[127], 0x77);
  // A READ into a page of it made read-only: the local write fails before anything is sent.
  ASSERT_EQ(mprotect(pg.p + kPage, kPage, PROT_READ), 0);
  Sge d{pg.addr(kPage), 64, mine->lkey};
  SendWr r = signaled_wr(2, &d, WrOpcode::RdmaRead);
  r.remote_addr = pr.b.addr();
  r.rkey = pr.b.mr->rkey;
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, r), 0);
  expect_completion(pr, pr.a.scq, 2, WcStatus::LocProtErr);
}

TEST(Odp, AReceiveIntoAPageNoLongerMappedCompletesInError) {
  Pair pr;
  Pages pg(2);
  Mr* mr = pr.b.dev->reg_mr(pr.b.pd, pg.p, pg.len, kOdpAll);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(munmap(pg.p + kPage, kPage), 0);
  Sge r{pg.addr(kPage), 256, mr->lkey};
  ASSERT_EQ(pr.b.dev->post_recv(pr.b.qp, RecvWr{5, &r, 1}), 0);
  Sge s{pr.a.addr(), 64, pr.a.mr->lkey};
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, signaled_wr(6, &s)), 0);
  expect_completion(pr, pr.b.rcq, 5, WcStatus::LocProtErr);
}

TEST(Odp, RegistrationRules) {
  Pair pr;
  Pages pg(4);
  ASSERT_EQ(munmap(pg.p + kPage, kPage), 0);
  // Pages that are not there: refused without ODP (EFAULT, as the kernel that cannot pin them),
  // taken with it.
  errno = 0;
  EXPECT_EQ(pr.b.dev->reg_mr(pr.b.pd, pg.p, pg.len, kLocalWrite), nullptr);
  EXPECT_EQ(errno, EFAULT);
  Mr* mr = pr.b.dev->reg_mr(pr.b.pd, pg.p, pg.len, kLocalWrite | kOnDemand);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(pr.b.dev->dereg_mr(mr), 0);
  // The whole address space only on demand.
  errno = 0;
  EXPECT_EQ(pr.b.dev->reg_mr(pr.b.pd, nullptr, UINT64_MAX, kLocalWrite), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // The access rules hold for ODP MRs too; persistence cannot be written back where pages may be missing.
  errno = 0;
  EXPECT_EQ(pr.b.dev->reg_mr(pr.b.pd, nullptr, UINT64_MAX, kRemoteWrite | kOnDemand), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(pr.b.dev->reg_mr(pr.b.pd, pg.p, kPage, kLocalWrite | kOnDemand | kFlushPersistent), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(pr.b.dev->reg_mr(pr.b.pd, pg.p, kPage, kLocalWrite | kOnDemand | kFlushGlobal), nullptr);
}

TEST(Odp, AdviseMrPrefetchesOnDemandRangesAndRefusesTheRest) {
  Pair pr;
  Pages pg(4);
  using A = Device::Advice;
  Device& d = *pr.b.dev;
  Mr* odp = d.reg_mr(pr.b.pd, pg.p, pg.len, kOdpAll);
  Mr* ro = d.reg_mr(pr.b.pd, pg.p, pg.len, kRemoteRead | kOnDemand);
  ASSERT_NE(odp, nullptr);
  ASSERT_NE(ro, nullptr);
  Sge s{pg.addr(kPage), uint32_t(2 * kPage), odp->lkey};
  EXPECT_EQ(d.advise_mr(pr.b.pd, A::PrefetchNoFault, &s, 1), 0);
  EXPECT_FALSE(pg.resident(1)) << "NO_FAULT faults nothing in";
  EXPECT_EQ(d.advise_mr(pr.b.pd, A::PrefetchWrite, &s, 1), 0);
  EXPECT_TRUE(pg.resident(1) && pg.resident(2));
  EXPECT_FALSE(pg.resident(0) || pg.resident(3));
  EXPECT_EQ(d.advise_mr(pr.b.pd, A::Prefetch, &s, 0), 0) << "no ranges: nothing to do";

  Sge bad = s;
  bad.lkey = pr.b.mr->lkey;  // an MR that is not on demand
  EXPECT_EQ(d.advise_mr(pr.b.pd, A::Prefetch, &bad, 1), EINVAL);
  bad = s;
  bad.lkey ^= 0x100;  // no MR
  EXPECT_EQ(d.advise_mr(pr.b.pd, A::Prefetch, &bad, 1), EFAULT);
  bad = {pg.addr(3 * kPage), uint32_t(2 * kPage), odp->lkey};  // past its end
  EXPECT_EQ(d.advise_mr(pr.b.pd, A::Prefetch, &bad, 1), EFAULT);
  bad = {pg.addr(), 64, ro->lkey};  // prefetch for writing without local write access
  EXPECT_EQ(d.advise_mr(pr.b.pd, A::PrefetchWrite, &bad, 1), EFAULT);
  EXPECT_EQ(d.advise_mr(pr.b.pd, A::Prefetch, &bad, 1), 0);
  Pd* other = d.alloc_pd();
  EXPECT_EQ(d.advise_mr(other, A::Prefetch, &s, 1), EFAULT) << "an MR of another PD";
  ASSERT_EQ(munmap(pg.p + 3 * kPage, kPage), 0);
  bad = {pg.addr(3 * kPage), 64, odp->lkey};
  EXPECT_EQ(d.advise_mr(pr.b.pd, A::Prefetch, &bad, 1), EFAULT) << "pages that are not there";
  EXPECT_EQ(d.advise_mr(pr.b.pd, A::PrefetchNoFault, &bad, 1), 0);
}

}  // namespace
}  // namespace uroce::test
