// Every RC operation at sizes 0, 1, MTU-1, MTU, MTU+1, 64 KiB and 1 MiB, for every path MTU:
// the bytes land exactly, and both sides complete with the right opcode, length, immediate,
// invalidated rkey, wr_id and status. Atomics execute once with the right original value.
#include <gtest/gtest.h>

#include <tuple>

#include "tests/support/harness.hpp"

namespace uroce::test {
namespace {

enum class SizeKind { Zero, One, MtuMinus1, Mtu, MtuPlus1, K64, M1 };
constexpr SizeKind kSizes[] = {SizeKind::Zero, SizeKind::One, SizeKind::MtuMinus1, SizeKind::Mtu,
                               SizeKind::MtuPlus1, SizeKind::K64, SizeKind::M1};
uint32_t size_of(SizeKind k, uint32_t mtu) {
  switch (k) {
    case SizeKind::Zero: return 0;
    case SizeKind::One: return 1;
    case SizeKind::MtuMinus1: return mtu - 1;
    case SizeKind::Mtu: return mtu;
    case SizeKind::MtuPlus1: return mtu + 1;
    case SizeKind::K64: return 65536;
    case SizeKind::M1: return 1 << 20;
  }
  return 0;
}

constexpr WrOpcode kOps[] = {WrOpcode::Send, WrOpcode::SendWithImm, WrOpcode::SendWithInv,
                             WrOpcode::RdmaWrite, WrOpcode::RdmaWriteWithImm, WrOpcode::RdmaRead};

using Param = std::tuple<Mtu, SizeKind, WrOpcode>;

class OpsTest : public ::testing::TestWithParam<Param> {};

TEST_P(OpsTest, BytesLandAndCompletionsAreExact) {
  auto [mtu, sk, opc] = GetParam();
  PairOptions o;
  o.mtu = mtu;
  o.mem = (1 << 20) + 64;
  o.access |= kMwBind;
  Pair pr(o);
  // SEND with Invalidate names a memory window of B's that B's QP bound.
  const uint32_t window = opc == WrOpcode::SendWithInv ? bound_window(pr, 1) : 0;
  if (opc == WrOpcode::SendWithInv) {
    ASSERT_NE(window, 0u);
  }
  const uint32_t len = size_of(sk, mtu_bytes(mtu));
  const bool read = opc == WrOpcode::RdmaRead;
  Endpoint& src = read ? pr.b : pr.a;  // where the bytes come from
  Endpoint& dst = read ? pr.a : pr.b;  // where they land
  fill_pattern(src.buf(), len + 16, len + uint32_t(opc));
  std::memset(dst.buf(), 0x5A, len + 16);

  const bool send = opc == WrOpcode::Send || opc == WrOpcode::SendWithImm || opc == WrOpcode::SendWithInv;
  const bool recv_needed = send || opc == WrOpcode::RdmaWriteWithImm;
  if (recv_needed) {
    Sge rs{pr.b.addr(), send ? len + 8 : 0, pr.b.mr->lkey};  // receive buffer larger than needed
    RecvWr rw{0xB0B, &rs, send ? 1u : 0u};
    ASSERT_EQ(pr.b.dev->post_recv(pr.b.qp, rw), 0);
  }
  Sge s{pr.a.addr(), len, pr.a.mr->lkey};
  SendWr wr = signaled_wr(0xA11CE, &s, opc);
  wr.imm_data = 0xC0DE0001;
  wr.invalidate_rkey = window;
  wr.remote_addr = pr.b.addr();
  wr.rkey = pr.b.mr->rkey;
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, wr), 0);

  Wc wc;
  ASSERT_TRUE(pr.next_wc(pr.a.scq, wc)) << "no send completion";
  EXPECT_EQ(wc.status, WcStatus::Success) << wc_status_name(wc.status);
  EXPECT_EQ(wc.wr_id, 0xA11CEu);
  EXPECT_EQ(wc.qp_num, pr.a.qp->qpn());
  WcOpcode want = send ? WcOpcode::Send : read ? WcOpcode::RdmaRead : WcOpcode::RdmaWrite;
  EXPECT_EQ(wc.opcode, want);
  if (read) {
    EXPECT_EQ(wc.byte_len, len);
  }

  if (recv_needed) {
    Wc rwc;
    ASSERT_TRUE(pr.next_wc(pr.b.rcq, rwc)) << "no receive completion";
    EXPECT_EQ(rwc.status, WcStatus::Success);
    EXPECT_EQ(rwc.wr_id, 0xB0Bu);
    EXPECT_EQ(rwc.byte_len, len);
    EXPECT_EQ(rwc.qp_num, pr.b.qp->qpn());
    EXPECT_EQ(rwc.src_qp, pr.a.qp->qpn());
    EXPECT_EQ(rwc.opcode, opc == WrOpcode::RdmaWriteWithImm ? WcOpcode::RecvRdmaWithImm : WcOpcode::Recv);
    const bool imm = opc == WrOpcode::SendWithImm || opc == WrOpcode::RdmaWriteWithImm;
    EXPECT_EQ(bool(rwc.wc_flags & kWcWithImm), imm);
    if (imm) {
      EXPECT_EQ(rwc.imm_data, 0xC0DE0001u);
    }
    EXPECT_EQ(bool(rwc.wc_flags & kWcWithInv), opc == WrOpcode::SendWithInv);
    if (opc == WrOpcode::SendWithInv) {
      EXPECT_EQ(rwc.invalidated_rkey, window);
      EXPECT_EQ(pr.b.mr->windows, 0u) << "the window is invalidated";
    }
  } else {
    Wc none;
    pr.run_until([] { return false; }, 100'000);
    EXPECT_EQ(pr.b.rcq->poll(&none, 1), 0u) << "a completion on the passive side";
  }
  ASSERT_EQ(std::memcmp(dst.buf(), src.buf(), len), 0) << "payload differs";
  for (uint32_t i = len; i < len + 16; ++i) ASSERT_EQ(dst.buf()[i], 0x5A) << "byte past the message written at " << i;
  EXPECT_TRUE(canaries_intact(pr.a) && canaries_intact(pr.b));
  EXPECT_EQ(pr.a.qp->state(), QpState::Rts);
  EXPECT_EQ(pr.b.qp->state(), QpState::Rts);
  EXPECT_EQ(pr.a.dev->counters().retransmitted, 0u);
}

std::string name(const ::testing::TestParamInfo<Param>& i) {
  static const char* sizes[] = {"0", "1", "MtuMinus1", "Mtu", "MtuPlus1", "64K", "1M"};
  return std::string(wr_opcode_name(std::get<2>(i.param))) + "_mtu" +
         std::to_string(mtu_bytes(std::get<0>(i.param))) + "_" + sizes[int(std::get<1>(i.param))];
}

INSTANTIATE_TEST_SUITE_P(AllOpsSizesMtus, OpsTest,
                         ::testing::Combine(::testing::Values(Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096),
                                            ::testing::ValuesIn(kSizes), ::testing::ValuesIn(kOps)),
                         name);

// Atomics: 8-byte aligned target, executed exactly once, the original value returned.
class AtomicTest : public ::testing::TestWithParam<Mtu> {};

TEST_P(AtomicTest, CompareSwapAndFetchAdd) {
  PairOptions o;
  o.mtu = GetParam();
  o.mem = 4096;
  Pair pr(o);
  uint64_t* target = reinterpret_cast<uint64_t*>(pr.b.buf() + 64);
  *target = 100;
  uint64_t* result = reinterpret_cast<uint64_t*>(pr.a.buf() + 8);
  *result = 0;
  Sge s{pr.a.addr() + 8, 8, pr.a.mr->lkey};
  SendWr wr;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = kSendSignaled;
  wr.remote_addr = pr.b.addr() + 64;
  wr.rkey = pr.b.mr->rkey;

  // FETCH_ADD 5: returns 100, leaves 105.
  wr.wr_id = 1;
  wr.opcode = WrOpcode::AtomicFetchAdd;
  wr.compare_add = 5;
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, wr), 0);
  Wc wc;
  ASSERT_TRUE(pr.next_wc(pr.a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(wc.opcode, WcOpcode::FetchAdd);
  EXPECT_EQ(wc.byte_len, 8u);
  EXPECT_EQ(*result, 100u);
  EXPECT_EQ(*target, 105u);

  // CMP_SWAP that fails (compare 7 != 105): returns 105, target unchanged.
  wr.wr_id = 2;
  wr.opcode = WrOpcode::AtomicCmpSwp;
  wr.compare_add = 7;
  wr.swap = 999;
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, wr), 0);
  ASSERT_TRUE(pr.next_wc(pr.a.scq, wc));
  EXPECT_EQ(wc.opcode, WcOpcode::CompSwap);
  EXPECT_EQ(*result, 105u);
  EXPECT_EQ(*target, 105u);

  // CMP_SWAP that succeeds.
  wr.wr_id = 3;
  wr.compare_add = 105;
  ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, wr), 0);
  ASSERT_TRUE(pr.next_wc(pr.a.scq, wc));
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(*result, 105u);
  EXPECT_EQ(*target, 999u);
  EXPECT_TRUE(canaries_intact(pr.a) && canaries_intact(pr.b));
}

INSTANTIATE_TEST_SUITE_P(Mtus, AtomicTest, ::testing::Values(Mtu::M256, Mtu::M1024, Mtu::M4096));

// Many operations in flight at once, mixed, unsignaled ones included: completions come in
// posting order and only for the signaled ones.
TEST(Ops, MixedQueueCompletesInOrder) {
  PairOptions o;
  o.mem = 1 << 20;
  Pair pr(o);
  fill_pattern(pr.a.buf(), 1 << 19, 7);
  fill_pattern(pr.b.buf() + (1 << 19), 1 << 19, 9);
  for (int i = 0; i < 64; ++i) {
    Sge rs{pr.b.addr() + 65536 + uint64_t(i) * 4096, 4096, pr.b.mr->lkey};
    RecvWr rw{uint64_t(1000 + i), &rs, 1};
    ASSERT_EQ(pr.b.dev->post_recv(pr.b.qp, rw), 0);
  }
  std::memset(pr.b.buf() + 8, 0, 8);  // the FETCH_ADD target
  std::vector<uint64_t> signaled;
  for (int i = 0; i < 200; ++i) {
    const WrOpcode ops[] = {WrOpcode::Send, WrOpcode::RdmaWrite, WrOpcode::RdmaRead, WrOpcode::AtomicFetchAdd};
    WrOpcode opc = ops[i % 4];
    if (opc == WrOpcode::Send && i / 4 >= 50) opc = WrOpcode::RdmaWrite;
    uint32_t len = opc == WrOpcode::AtomicFetchAdd ? 8 : uint32_t(1 + (i * 977) % 4000);
    Sge s{pr.a.addr() + (opc == WrOpcode::RdmaRead ? (1 << 19) + uint64_t(i) * 1024 : uint64_t(i) * 128), len, pr.a.mr->lkey};
    if (opc == WrOpcode::AtomicFetchAdd) s.addr = pr.a.addr() + (1 << 19) - 4096 + uint64_t(i) * 8;
    SendWr wr;
    wr.wr_id = uint64_t(i);
    wr.opcode = opc;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.send_flags = (i % 3 == 0) ? uint32_t(kSendSignaled) : 0u;
    wr.remote_addr = opc == WrOpcode::RdmaRead ? pr.b.addr() + (1 << 19) + uint64_t(i) * 1024
                     : opc == WrOpcode::AtomicFetchAdd ? pr.b.addr() + 8
                                                       : pr.b.addr() + 400000 + uint64_t(i) * 128;
    wr.rkey = pr.b.mr->rkey;
    wr.compare_add = 1;
    if (wr.send_flags) signaled.push_back(wr.wr_id);
    ASSERT_EQ(pr.a.dev->post_send(pr.a.qp, wr), 0) << i;
  }
  std::vector<uint64_t> got;
  Wc wc;
  while (got.size() < signaled.size() && pr.next_wc(pr.a.scq, wc)) {
    ASSERT_EQ(wc.status, WcStatus::Success) << wc_status_name(wc.status);
    got.push_back(wc.wr_id);
  }
  EXPECT_EQ(got, signaled);
  pr.run_until([] { return false; }, 1'000'000);
  EXPECT_EQ(pr.a.scq->poll(&wc, 1), 0u) << "a completion for an unsignaled WR";
  uint64_t adds;
  std::memcpy(&adds, pr.b.buf() + 8, 8);
  EXPECT_EQ(adds, 50u) << "50 FETCH_ADDs of 1";
  EXPECT_EQ(pr.a.qp->sq_outstanding(), 0u);
}

}  // namespace
}  // namespace uroce::test
