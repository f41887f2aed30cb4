// The fault model (engine/fault.hpp: the decisions, shared by the test FakeLink and the port)
// and the port's fault stage (port/fault_stage.cpp: which frames, where a corruption lands,
// holding frames back), without DPDK: frames are byte vectors, handles are their addresses.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/fault.hpp"
#include "port/fault_stage.hpp"
#include "proto/packet.hpp"

using namespace uroce;

namespace {

// A valid RC RDMA WRITE ONLY frame (IPv4) with `payload` bytes of 0x42.
std::vector<uint8_t> roce_write(uint32_t payload) {
  static std::vector<uint8_t> data;
  data.assign(payload, 0x42);
  proto::Packet p;
  p.ip_src[10] = p.ip_src[11] = 0xFF, p.ip_src[12] = 198, p.ip_src[13] = 18, p.ip_src[15] = 1;
  p.ip_dst = p.ip_src, p.ip_dst[15] = 2;
  p.opcode = 0x0A;  // RC RDMA WRITE ONLY
  p.dest_qp = 0x11;
  p.psn = 7;
  p.reth.dma_len = payload;
  p.payload = data;
  std::vector<uint8_t> f(proto::frame_len(p));
  EXPECT_TRUE(proto::build(p, f).ok());
  return f;
}

// `n` decisions of one seed for one config.
std::vector<engine::FaultDecision> run(const engine::FaultConfig& f, uint64_t seed, int n) {
  engine::FaultDice dice(seed);
  std::vector<engine::FaultDecision> v;
  for (int i = 0; i < n; ++i) v.push_back(dice.decide(f, 800, true));
  return v;
}

bool same(const engine::FaultDecision& a, const engine::FaultDecision& b) {
  return a.drop == b.drop && a.corrupt == b.corrupt && a.corrupt_bit == b.corrupt_bit && a.delay == b.delay &&
         a.delay_ns == b.delay_ns && a.duplicate == b.duplicate && a.reorder == b.reorder &&
         a.reorder_after == b.reorder_after;
}

}  // namespace

// For many frames each fault happens about as often as asked: within 6 standard deviations of
// the expected count (a binomial), for a fixed seed (so the test never flakes).
TEST(FaultDice, CountsMatchTheProbabilities) {
  engine::FaultConfig f;
  f.drop = 0.01, f.corrupt = 0.02, f.delay = 0.05, f.duplicate = 0.03, f.reorder = 0.04;
  f.min_delay_ns = 1000, f.max_delay_ns = 3000;
  const int n = 200'000;
  const auto v = run(f, 12345, n);
  size_t drop = 0, corrupt = 0, delay = 0, dup = 0, reorder = 0;
  for (const auto& d : v) {
    drop += d.drop, corrupt += d.corrupt, delay += d.delay, dup += d.duplicate, reorder += d.reorder;
    EXPECT_TRUE(!d.drop || !(d.corrupt || d.delay || d.duplicate || d.reorder));
    EXPECT_TRUE(!d.corrupt || d.corrupt_bit < 800u);
    EXPECT_TRUE(!d.delay || (d.delay_ns >= 1000 && d.delay_ns <= 3000));
    EXPECT_TRUE(!d.reorder || (d.reorder_after >= 1 && d.reorder_after <= f.reorder_window));
  }
  auto near = [&](size_t got, double p) {
    const double m = n * p, sd = std::sqrt(n * p * (1 - p));
    return std::fabs(double(got) - m) < 6 * sd;
  };
  const double kept = 1 - f.drop;  // the other faults are decided only for frames not dropped
  EXPECT_TRUE(near(drop, f.drop)) << drop;
  EXPECT_TRUE(near(corrupt, kept * f.corrupt)) << corrupt;
  EXPECT_TRUE(near(delay, kept * f.delay)) << delay;
  EXPECT_TRUE(near(dup, kept * f.duplicate)) << dup;
  EXPECT_TRUE(near(reorder, kept * f.reorder)) << reorder;
}

// Same seed, same decisions; another seed, others. A fault of probability 0 draws nothing,
// so turning one off leaves the decisions of those drawn before it as they were.
TEST(FaultDice, DeterministicForASeed) {
  engine::FaultConfig f;
  f.drop = 0.1, f.duplicate = 0.1;
  const auto a = run(f, 7, 5000), b = run(f, 7, 5000), c = run(f, 8, 5000);
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(same(a[i], b[i])) << i;
    differ += !same(a[i], c[i]);
  }
  EXPECT_GT(differ, 100u);
  engine::FaultConfig only_drop;
  only_drop.drop = 0.1;
  engine::FaultConfig drop_then_nothing = only_drop;
  drop_then_nothing.corrupt = 0;  // explicitly zero: no draw
  const auto d = run(only_drop, 9, 1000), e = run(drop_then_nothing, 9, 1000);
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d[i].drop, e[i].drop);
  engine::FaultConfig none;
  for (const auto& x : run(none, 1, 1000)) EXPECT_TRUE(same(x, engine::FaultDecision{}));
}

TEST(FaultDice, NoReorderWhenTheLinkCannotHold) {
  engine::FaultConfig f;
  f.reorder = 1;
  engine::FaultDice dice(3);
  EXPECT_TRUE(dice.decide(f, 0, true).reorder);
  EXPECT_FALSE(dice.decide(f, 0, false).reorder);
}

// RoCE frames only, unless `all`; a corruption lands after the BTH and its extension headers,
// inside the IP packet, so that parse() reports a bad ICRC (what the engine counts).
TEST(FaultStage, CorruptsOnlyWhereTheIcrcCatchesIt) {
  port::FaultStage st;
  engine::FaultConfig f;
  f.corrupt = 1;
  st.configure(f, 1, false);
  const std::vector<uint8_t> clean = roce_write(64);
  proto::Packet p;
  ASSERT_TRUE(proto::parse(clean, p).ok());
  const size_t first = 14 + 20 + 8 + 12 + 16;  // after the RETH
  for (int i = 0; i < 500; ++i) {
    std::vector<uint8_t> frame = clean;
    frame.resize(frame.size() + 6, 0);  // an Ethernet trailer: outside the IP packet, never hit
    const engine::FaultDecision d = st.decide(frame.data(), uint32_t(frame.size()));
    ASSERT_TRUE(d.corrupt);
    size_t changed = 0, where = 0;
    for (size_t j = 0; j < frame.size(); ++j)
      if (j >= clean.size() ? frame[j] != 0 : frame[j] != clean[j]) ++changed, where = j;
    ASSERT_EQ(changed, 1u);
    EXPECT_GE(where, first);
    EXPECT_LT(where, clean.size());
    EXPECT_EQ(proto::parse(frame, p).error, proto::ParseError::BadIcrc) << "byte " << where;
  }
  EXPECT_EQ(st.counts().corrupted, 500u);

  std::vector<uint8_t> arp(60, 0);
  arp[12] = 0x08, arp[13] = 0x06;
  const std::vector<uint8_t> arp_clean = arp;
  EXPECT_FALSE(st.decide(arp.data(), uint32_t(arp.size())).corrupt);  // RoCE only
  EXPECT_EQ(arp, arp_clean);
  st.configure(f, 1, true);
  EXPECT_TRUE(st.decide(arp.data(), uint32_t(arp.size())).corrupt);  // fault_all
}

// Delayed frames come out when due, in order; a reordered one after the frames it waits for
// (or its time); a full hold is counted and refuses.
TEST(FaultStage, HoldsAndReleases) {
  port::FaultStage st;
  engine::FaultConfig f;
  f.delay = 1;
  st.configure(f, 1, false);
  int a = 0, b = 0, c = 0;
  engine::FaultDecision delay;
  delay.delay = true, delay.delay_ns = 1000;
  ASSERT_TRUE(st.hold(&a, delay, 10'000));
  ASSERT_TRUE(st.hold(&b, delay, 10'500));
  void* out[4];
  EXPECT_EQ(st.release(10'999, out, 4), 0u);
  ASSERT_EQ(st.release(11'000, out, 4), 1u);
  EXPECT_EQ(out[0], &a);
  ASSERT_EQ(st.release(20'000, out, 4), 1u);
  EXPECT_EQ(out[0], &b);
  EXPECT_EQ(st.counts().delayed, 2u);

  engine::FaultDecision reorder;
  reorder.reorder = true, reorder.reorder_after = 2;
  ASSERT_TRUE(st.hold(&c, reorder, 0));
  st.passed();
  EXPECT_EQ(st.release(1, out, 4), 0u);
  st.passed();
  ASSERT_EQ(st.release(1, out, 4), 1u);
  EXPECT_EQ(out[0], &c);
  ASSERT_TRUE(st.hold(&c, reorder, 0));  // nothing follows: out after kFaultReorderHoldNs
  EXPECT_EQ(st.release(param::kFaultReorderHoldNs - 1, out, 4), 0u);
  EXPECT_EQ(st.release(param::kFaultReorderHoldNs, out, 4), 1u);
  EXPECT_EQ(st.counts().reordered, 2u);

  std::vector<int> many(param::kFaultHold + 1);
  for (uint32_t i = 0; i < param::kFaultHold; ++i) ASSERT_TRUE(st.hold(&many[i], delay, 0));
  EXPECT_FALSE(st.hold(&many.back(), delay, 0));
  EXPECT_EQ(st.counts().hold_full, 1u);
  size_t total = 0;
  while (size_t n = st.release_all(out, 4)) total += n;
  EXPECT_EQ(total, param::kFaultHold);
  EXPECT_FALSE(st.holding());
}
