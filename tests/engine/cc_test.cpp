// Congestion control's reaction point (engine/cc.hpp): every DCQCN rule on a clock the test
// moves by hand, each rate change named by the rule that made it; TIMELY's four rules; the
// pacer's spacing; and on the FakeLink pair under the virtual clock: a CNP slows the QP that
// gets it (frames on the wire spaced at its rate, data and completions intact), a QP without
// congestion control has no reaction point and is never held.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/cc.hpp"
#include "engine/telemetry.hpp"
#include "tests/support/harness.hpp"

namespace uroce::test {
namespace {

using cc::Rule;
namespace op = proto::op;

constexpr uint64_t kUs = 1000;
constexpr double kMbps = 1e6, kGbps = 1e9;

cc::Config dcqcn(uint32_t byte_reset = param::kRpgByteResetBytes) {
  cc::Config c;
  c.algo = cc::Algo::Dcqcn;
  c.dcqcn.rpg_byte_reset = byte_reset;
  return c;
}

// What a cut leaves of `rate` with congestion estimate `alpha` (the default rpg_gd and
// rpg_min_dec_fac): rate * max(1 - alpha * 1024 / 2^11, 50%).
double after_cut(double rate, double alpha) { return rate * std::max(1 - alpha / 2, 0.5); }

// ---- Choosing and configuring ------------------------------------------------------------------

TEST(CcConfig, OffMeansNoReactionPoint) {
  cc::Config c;
  EXPECT_EQ(cc::make(c), nullptr);
  c.algo = cc::Algo::Dcqcn;
  EXPECT_NE(cc::make(c), nullptr);
  c.algo = cc::Algo::Timely;
  EXPECT_NE(cc::make(c), nullptr);
}

TEST(CcConfig, KeysTakeMlx5NamesAndRefuseBadValues) {
  cc::Config c;
  std::string msg;
  bool unknown = false;
  EXPECT_TRUE(cc::set_key(c, "cc", "dcqcn", msg, unknown));
  EXPECT_EQ(c.algo, cc::Algo::Dcqcn);
  EXPECT_TRUE(cc::set_key(c, "rpg_ai_rate", "20", msg, unknown));
  EXPECT_EQ(c.dcqcn.rpg_ai_rate, 20u);
  EXPECT_TRUE(cc::set_key(c, "clamp_tgt_rate", "1", msg, unknown));
  EXPECT_TRUE(c.dcqcn.clamp_tgt_rate);
  EXPECT_TRUE(cc::set_key(c, "timely_t_high", "300", msg, unknown));
  EXPECT_EQ(c.timely.t_high_us, 300u);
  EXPECT_FALSE(cc::set_key(c, "rpg_gd", "16", msg, unknown));
  EXPECT_FALSE(unknown);
  EXPECT_NE(msg.find("rpg_gd"), std::string::npos) << msg;
  EXPECT_FALSE(cc::set_key(c, "cc", "cubic", msg, unknown));
  EXPECT_FALSE(cc::set_key(c, "rpg_no_such_key", "1", msg, unknown));
  EXPECT_TRUE(unknown);
  EXPECT_EQ(cc::keys().size(), 26u);
}

// cc_per_qp: a device's QPs take the list's algorithms in turn, in the order they were made,
// over `cc` (to compare algorithms on the same traffic in one process); a QP reset to a new
// connection keeps its own.
TEST(CcConfig, PerQpTakesTheListInTurn) {
  cc::Config c;
  std::string msg;
  bool unknown = false;
  EXPECT_TRUE(cc::set_key(c, "cc", "dcqcn", msg, unknown));
  EXPECT_TRUE(cc::set_key(c, "cc_per_qp", "timely,off,dcqcn", msg, unknown)) << msg;
  ASSERT_EQ(c.per_qp.size(), 3u);
  for (const char* bad : {"timely,", "dcqcn,cubic", ""}) {
    EXPECT_FALSE(cc::set_key(c, "cc_per_qp", bad, msg, unknown)) << bad;
    EXPECT_NE(msg.find("cc_per_qp"), std::string::npos) << msg;
  }
  PairOptions o;
  o.endpoints = false;
  o.config_a = [&](Device::Config& d) { d.cc = c; };
  Pair pr(o);
  Device& dev = *pr.a.dev;
  Pd* pd = dev.alloc_pd();
  Cq* cq = dev.create_cq(16);
  QpInitAttr ia;
  ia.pd = pd;
  ia.send_cq = ia.recv_cq = cq;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  const cc::Algo want[] = {cc::Algo::Timely, cc::Algo::Off, cc::Algo::Dcqcn, cc::Algo::Timely};
  std::vector<Qp*> qps;
  for (cc::Algo a : want) {
    Qp* q = dev.create_qp(ia);
    ASSERT_NE(q, nullptr);
    qps.push_back(q);
    if (a == cc::Algo::Off) {
      EXPECT_EQ(q->cc, nullptr);
    } else {
      ASSERT_NE(q->cc, nullptr);
      EXPECT_EQ(q->cc->algo(), a);
    }
  }
  QpAttr reset;
  reset.qp_state = QpState::Reset;
  ASSERT_EQ(dev.modify_qp(qps[0], reset, kAttrState), 0);
  ASSERT_NE(qps[0]->cc, nullptr);
  EXPECT_EQ(qps[0]->cc->algo(), cc::Algo::Timely) << "a reset keeps the QP's own algorithm";
}

// ---- DCQCN, rule by rule -----------------------------------------------------------------------

TEST(Dcqcn, UnlimitedUntilTheFirstCnp) {
  auto rp = cc::make(dcqcn());
  EXPECT_FALSE(rp->limited());
  EXPECT_EQ(rp->state(), "unlimited");
  EXPECT_DOUBLE_EQ(rp->rate_bps(), 100 * kGbps);
  for (uint64_t t = 0; t < 10'000 * kUs; t += 100 * kUs) {
    EXPECT_TRUE(rp->may_send(t));
    rp->sent(t, 1 << 20);
  }
  EXPECT_EQ(rp->send_at(), 0u);
  EXPECT_FALSE(rp->limited()) << "bytes and time alone never limit a QP";
}

TEST(Dcqcn, FirstCnpStartsTheLimiterAtTheLineRateAndCutsIt) {
  auto rp = cc::make(dcqcn());
  rp->on_cnp(1000 * kUs);
  ASSERT_TRUE(rp->limited());
  EXPECT_EQ(rp->last().rule, Rule::FirstCnp);
  EXPECT_EQ(rule_name(rp->last().rule), "first CNP");
  EXPECT_DOUBLE_EQ(rp->alpha(), 1023.0 / 1024);
  EXPECT_DOUBLE_EQ(rp->rate_bps(), after_cut(100 * kGbps, 1023.0 / 1024));
  EXPECT_DOUBLE_EQ(rp->target_bps(), 100 * kGbps) << "the target is the rate before the cut";
  EXPECT_EQ(rp->cnps(), 1u);
}

TEST(Dcqcn, RateToSetOnFirstCnpIsWhereTheLimiterStarts) {
  cc::Config c = dcqcn();
  c.dcqcn.rate_to_set_on_first_cnp = 40'000;
  auto rp = cc::make(c);
  rp->on_cnp(0);
  EXPECT_DOUBLE_EQ(rp->target_bps(), 40 * kGbps);
  EXPECT_DOUBLE_EQ(rp->rate_bps(), after_cut(40 * kGbps, 1023.0 / 1024));
}

TEST(Dcqcn, ACnpAfterTheMonitorPeriodCutsByAlpha) {
  auto rp = cc::make(dcqcn());
  rp->on_cnp(0);
  const double r1 = rp->rate_bps();
  rp->on_cnp(10 * kUs);  // 10 quiet periods of dce_tcp_rtt (1 us): alpha * g^10
  const double g = 1019.0 / 1024, alpha = 1023.0 / 1024 * std::pow(g, 10);
  EXPECT_EQ(rp->last().rule, Rule::Cut);
  EXPECT_EQ(rp->changes(Rule::Cut), 1u);
  EXPECT_NEAR(rp->rate_bps(), after_cut(r1, alpha), 1.0);
  EXPECT_DOUBLE_EQ(rp->target_bps(), 100 * kGbps) << "no clamp: the target stays";
}

TEST(Dcqcn, CnpsInsideTheMonitorPeriodMakeOneCutAtItsEnd) {
  auto rp = cc::make(dcqcn());
  rp->on_cnp(0);
  const double r1 = rp->rate_bps();
  rp->on_cnp(1 * kUs);
  rp->on_cnp(2 * kUs);
  rp->on_cnp(3 * kUs);
  EXPECT_EQ(rp->changes(Rule::Cut), 0u) << "rate_reduce_monitor_period is 4 us";
  EXPECT_DOUBLE_EQ(rp->rate_bps(), r1);
  EXPECT_TRUE(rp->may_send(5 * kUs));  // catches up: the pending cut at 4 us
  EXPECT_EQ(rp->changes(Rule::Cut), 1u);
  EXPECT_EQ(rp->last().ns, 4 * kUs);
  EXPECT_LT(rp->rate_bps(), r1);
  EXPECT_EQ(rp->cnps(), 4u);
}

TEST(Dcqcn, AlphaRisesInAPeriodWithACnpAndDecaysInAQuietOne) {
  auto rp = cc::make(dcqcn());
  const double g = 1019.0 / 1024;
  rp->on_cnp(0);
  double a = 1023.0 / 1024;
  rp->may_send(3 * kUs);  // three quiet periods
  a *= g * g * g;
  EXPECT_NEAR(rp->alpha(), a, 1e-12);
  rp->on_cnp(3 * kUs + 500);  // a CNP in the fourth period
  rp->may_send(4 * kUs);
  a = g * a + (1 - g);
  EXPECT_NEAR(rp->alpha(), a, 1e-12);
  rp->may_send(104 * kUs);  // 100 quiet periods
  a *= std::pow(g, 100);
  EXPECT_NEAR(rp->alpha(), a, 1e-12);
}

TEST(Dcqcn, TheTimerRaisesTheRateByFastRecoveryThenAdditiveIncrease) {
  auto rp = cc::make(dcqcn(0));  // no byte counter: the timer alone
  rp->on_cnp(0);
  const double r1 = rp->rate_bps(), target = 100 * kGbps;
  rp->may_send(299 * kUs);
  EXPECT_EQ(rp->changes(Rule::FastRecovery), 0u);
  rp->may_send(300 * kUs);  // rpg_time_reset: stage T 0 < rpg_threshold 1
  EXPECT_EQ(rp->last().rule, Rule::FastRecovery);
  EXPECT_EQ(rp->last().ns, 300 * kUs);
  const double r2 = (target + r1) / 2;
  EXPECT_DOUBLE_EQ(rp->rate_bps(), r2);
  EXPECT_DOUBLE_EQ(rp->target_bps(), target) << "fast recovery keeps the target";
  EXPECT_EQ(rp->state(), "additive increase");
  rp->may_send(600 * kUs);  // T is 1: additive increase, the target + rpg_ai_rate (capped at the line rate)
  EXPECT_EQ(rp->last().rule, Rule::AdditiveIncrease);
  EXPECT_DOUBLE_EQ(rp->target_bps(), target) << "the target never exceeds the maximum";
  EXPECT_DOUBLE_EQ(rp->rate_bps(), (target + r2) / 2);
}

TEST(Dcqcn, AdditiveIncreaseRaisesTheTargetByAiRate) {
  cc::Config c = dcqcn(0);
  c.dcqcn.rate_to_set_on_first_cnp = 10'000;  // the target below the line rate
  auto rp = cc::make(c);
  rp->on_cnp(0);
  rp->may_send(300 * kUs);
  EXPECT_EQ(rp->last().rule, Rule::FastRecovery);
  const double r = rp->rate_bps();
  rp->may_send(600 * kUs);
  EXPECT_EQ(rp->last().rule, Rule::AdditiveIncrease);
  EXPECT_DOUBLE_EQ(rp->target_bps(), 10 * kGbps + 5 * kMbps);
  EXPECT_DOUBLE_EQ(rp->rate_bps(), (10 * kGbps + 5 * kMbps + r) / 2);
}

TEST(Dcqcn, TheByteCounterRaisesTheRateToo) {
  cc::Config c = dcqcn(32767);
  c.dcqcn.rpg_time_reset = 1'000'000;  // one second: the timer stays out of it
  auto rp = cc::make(c);
  rp->on_cnp(0);
  const double r1 = rp->rate_bps();
  rp->sent(1 * kUs, 32766);
  EXPECT_EQ(rp->changes(Rule::FastRecovery), 0u);
  rp->sent(2 * kUs, 1);  // 32767 bytes: stage BC
  EXPECT_EQ(rp->last().rule, Rule::FastRecovery);
  EXPECT_DOUBLE_EQ(rp->rate_bps(), (100 * kGbps + r1) / 2);
}

TEST(Dcqcn, BothStagesAboveTheThresholdMakeHyperIncrease) {
  cc::Config c = dcqcn(1000);
  c.dcqcn.rpg_time_reset = 100;
  c.dcqcn.rate_to_set_on_first_cnp = 10'000;
  auto rp = cc::make(c);
  rp->on_cnp(0);
  std::vector<cc::Change> log;
  rp->log = &log;
  rp->sent(1 * kUs, 1000);   // T 0, BC 0: fast recovery
  rp->sent(2 * kUs, 1000);   // T 0, BC 1: additive
  rp->may_send(100 * kUs);   // T 0, BC 2: additive
  rp->may_send(200 * kUs);   // T 1, BC 2: additive
  const double target = rp->target_bps();
  rp->sent(201 * kUs, 1000); // T 2, BC 2: both above 1, hyper: target + (2 - 1) * rpg_hai_rate
  ASSERT_EQ(log.size(), 5u);
  const Rule want[] = {Rule::FastRecovery, Rule::AdditiveIncrease, Rule::AdditiveIncrease, Rule::AdditiveIncrease,
                       Rule::HyperIncrease};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(log[i].rule, want[i]) << i << ": " << rule_name(log[i].rule);
  EXPECT_DOUBLE_EQ(rp->target_bps(), target + 50 * kMbps);
  EXPECT_EQ(rp->state(), "hyper increase");
  rp->log = nullptr;
}

TEST(Dcqcn, ACutStartsTheStagesAgain) {
  cc::Config c = dcqcn(1000);
  c.dcqcn.rpg_time_reset = 100;
  auto rp = cc::make(c);
  rp->on_cnp(0);
  for (int i = 0; i < 4; ++i) rp->sent(uint64_t(i + 1) * kUs, 1000);
  rp->may_send(200 * kUs);
  EXPECT_NE(rp->state(), "fast recovery");
  rp->on_cnp(201 * kUs);
  EXPECT_EQ(rp->last().rule, Rule::Cut);
  EXPECT_EQ(rp->state(), "fast recovery");
}

TEST(Dcqcn, ClampTgtRateSetsTheTargetOnEveryCut) {
  cc::Config c = dcqcn(0);
  c.dcqcn.clamp_tgt_rate = true;
  auto rp = cc::make(c);
  rp->on_cnp(0);
  const double r1 = rp->rate_bps();
  rp->on_cnp(10 * kUs);
  EXPECT_DOUBLE_EQ(rp->target_bps(), r1);
}

TEST(Dcqcn, ClampAfterTimeIncSetsTheTargetOnlyOnceTheTimerRaisedTheRate) {
  auto rp = cc::make(dcqcn(0));  // clamp_tgt_rate_after_time_inc is on by default
  rp->on_cnp(0);
  rp->on_cnp(10 * kUs);
  EXPECT_DOUBLE_EQ(rp->target_bps(), 100 * kGbps) << "no timer increase since the first cut";
  rp->may_send(310 * kUs);
  EXPECT_EQ(rp->last().rule, Rule::FastRecovery);
  const double before = rp->rate_bps();
  rp->on_cnp(320 * kUs);
  EXPECT_EQ(rp->last().rule, Rule::Cut);
  EXPECT_DOUBLE_EQ(rp->target_bps(), before);
}

TEST(Dcqcn, MinDecFacBoundsACutAndMinRateBoundsTheRate) {
  cc::Config c = dcqcn(0);
  c.dcqcn.rpg_gd = 10;            // alpha * 1024 / 2^10 = alpha: a cut would take nearly all
  c.dcqcn.rpg_min_dec_fac = 80;   // but one cut keeps 80%
  c.dcqcn.rpg_min_rate = 2'000;   // and nothing goes below 2 Gbit/s
  auto rp = cc::make(c);
  rp->on_cnp(0);
  EXPECT_DOUBLE_EQ(rp->rate_bps(), 80 * kGbps);
  for (uint64_t t = 10; t < 2000; t += 10) rp->on_cnp(t * kUs);
  EXPECT_DOUBLE_EQ(rp->rate_bps(), 2 * kGbps);
  EXPECT_GT(rp->changes(Rule::Cut), 10u);
}

TEST(Dcqcn, TheLimiterIsReleasedAtTheMaximum) {
  auto rp = cc::make(dcqcn(0));
  rp->on_cnp(0);
  rp->may_send(20'000 * kUs);  // each timer stage halves the gap to the line rate: 14 of them
  EXPECT_FALSE(rp->limited());
  EXPECT_EQ(rp->last().rule, Rule::Release);
  EXPECT_EQ(rp->changes(Rule::Release), 1u);
  EXPECT_EQ(rp->state(), "unlimited");
  EXPECT_DOUBLE_EQ(rp->rate_bps(), 100 * kGbps);
  EXPECT_EQ(rp->send_at(), 0u);
  rp->on_cnp(20'001 * kUs);  // the next CNP starts it again
  EXPECT_TRUE(rp->limited());
  EXPECT_EQ(rp->last().rule, Rule::FirstCnp);
}

// The timers release the limiter while no packet asks the pacer (nothing is sent): a CNP that
// comes after that is a first CNP again, from the line rate, not a cut of the released rate
// (which is none: it used to fall to rpg_min_rate). Seen in a capture's notes (memif-bottleneck).
TEST(Dcqcn, ACnpAfterTheTimersReleasedTheLimiterIsAFirstCnp) {
  auto rp = cc::make(dcqcn(0));
  rp->on_cnp(0);
  ASSERT_TRUE(rp->limited());
  rp->on_cnp(20'000 * kUs);  // no may_send since the first: the timers catch up here first
  EXPECT_EQ(rp->changes(Rule::Release), 1u);
  EXPECT_EQ(rp->last().rule, Rule::FirstCnp);
  EXPECT_DOUBLE_EQ(rp->rate_bps(), after_cut(100 * kGbps, 1023.0 / 1024));
  EXPECT_DOUBLE_EQ(rp->target_bps(), 100 * kGbps);
}

TEST(Dcqcn, RpgMaxRateCapsTheTarget) {
  cc::Config c = dcqcn(0);
  c.dcqcn.rpg_max_rate = 25'000;
  auto rp = cc::make(c);
  rp->on_cnp(0);
  EXPECT_DOUBLE_EQ(rp->target_bps(), 25 * kGbps);
  EXPECT_DOUBLE_EQ(rp->rate_bps(), after_cut(25 * kGbps, 1023.0 / 1024));
}

// ---- The pacer ---------------------------------------------------------------------------------

TEST(Pacer, PacketsGoAtTheRateAfterABurst) {
  cc::Config c = dcqcn(0);
  c.dcqcn.rate_to_set_on_first_cnp = 16'000;  // a cut to 8 Gbit/s: one byte a nanosecond
  c.dcqcn.rpg_time_reset = 1'000'000;
  c.burst_bytes = 4000;
  auto rp = cc::make(c);
  const uint64_t t0 = 1'000'000;
  rp->on_cnp(t0);
  ASSERT_NEAR(rp->rate_bps(), 8 * kGbps, 0.01 * kGbps);
  const double ns_per_byte = 8e9 / rp->rate_bps();
  ASSERT_TRUE(rp->may_send(t0));
  rp->sent(t0, 1000);
  EXPECT_EQ(rp->send_at(), t0 + uint64_t(1000 * ns_per_byte));
  EXPECT_FALSE(rp->may_send(rp->send_at() - 1));
  EXPECT_TRUE(rp->may_send(rp->send_at()));
  // After an idle time the bucket holds burst_bytes of credit: the frame that is due and four
  // more of 1000 bytes go at once, then the rate holds the next one.
  const uint64_t t1 = t0 + 1'000'000;
  int at_once = 0;
  while (rp->may_send(t1) && at_once < 100) rp->sent(t1, 1000), ++at_once;
  EXPECT_EQ(at_once, 5);
  EXPECT_EQ(rp->send_at(), t1 + uint64_t(1000 * ns_per_byte));
}

// ---- TIMELY ------------------------------------------------------------------------------------

cc::Config timely() {
  cc::Config c;
  c.algo = cc::Algo::Timely;
  return c;
}

TEST(Timely, HighRttCutsByBetaTimesTheExcess) {
  auto rp = cc::make(timely());
  rp->on_rtt(0, 100 * kUs);  // the first sample: only remembered
  EXPECT_FALSE(rp->limited());
  rp->on_rtt(10 * kUs, 1000 * kUs);  // above t_high (500 us)
  ASSERT_TRUE(rp->limited());
  EXPECT_EQ(rp->last().rule, Rule::TimelyHighRtt);
  EXPECT_DOUBLE_EQ(rp->rate_bps(), 100 * kGbps * (1 - 0.8 * (1 - 500.0 / 1000)));
}

TEST(Timely, LowRttAddsDelta) {
  auto rp = cc::make(timely());
  rp->on_rtt(0, 100 * kUs);
  rp->on_rtt(1, 1000 * kUs);
  const double r = rp->rate_bps();
  rp->on_rtt(2, 30 * kUs);  // below t_low (50 us)
  EXPECT_EQ(rp->last().rule, Rule::TimelyLowRtt);
  EXPECT_DOUBLE_EQ(rp->rate_bps(), r + 10 * kMbps);
}

TEST(Timely, RisingRttInTheBandCutsByTheGradientFallingAddsAndHyperAdds) {
  auto rp = cc::make(timely());
  rp->on_rtt(0, 1000 * kUs);
  rp->on_rtt(1, 1000 * kUs);  // high RTT: limited
  ASSERT_TRUE(rp->limited());
  rp->on_rtt(2, 100 * kUs);   // falling: the smoothed difference is negative
  EXPECT_EQ(rp->last().rule, Rule::TimelyGradientUp);
  double r = rp->rate_bps();
  for (int i = 0; i < 10; ++i) rp->on_rtt(3 + i, 100 * kUs);  // flat: the difference decays towards 0, still <= 0
  EXPECT_EQ(rp->last().rule, Rule::TimelyGradientUp);
  // five in a row: each later one adds 5 * delta
  EXPECT_DOUBLE_EQ(rp->rate_bps(), r + (3 * 1 + 7 * 5) * 10 * kMbps);
  r = rp->rate_bps();
  rp->on_rtt(20, 300 * kUs);  // rising by 200 us: the gradient is positive
  EXPECT_EQ(rp->last().rule, Rule::TimelyGradientDown);
  EXPECT_LT(rp->rate_bps(), r);
  EXPECT_EQ(rp->changes(Rule::TimelyGradientDown), 1u);
}

// ---- The congestion point (engine/bottleneck.hpp) ----------------------------------------------

TEST(Bottleneck, QueuesAtItsRateMarksAboveKAndDropsWhenFull) {
  BottleneckConfig c;
  c.rate_bps = 8'000'000'000;  // one byte a nanosecond
  c.overhead = 0;
  c.mark_bytes = 1500;
  c.queue_bytes = 3500;
  Bottleneck q;
  BottleneckVerdict v = q.admit(c, 0, 1000, true);
  EXPECT_FALSE(v.drop || v.mark);
  EXPECT_EQ(v.depart_ns, 1000u);
  v = q.admit(c, 0, 1000, true);
  EXPECT_EQ(v.queue_bytes, 1000u);
  EXPECT_EQ(v.depart_ns, 2000u);
  EXPECT_FALSE(v.mark) << "1000 waiting: not above K";
  v = q.admit(c, 0, 1000, false);
  EXPECT_FALSE(v.mark) << "above K, but not ECN-capable";
  EXPECT_FALSE(v.drop);
  v = q.admit(c, 0, 1000, true);
  EXPECT_TRUE(v.drop) << "3000 waiting + 1000 > 3500";
  EXPECT_EQ(q.queue_bytes(1500), 2000u);
  v = q.admit(c, 1500, 1000, true);
  EXPECT_TRUE(v.mark) << "2000 waiting > K";
  EXPECT_EQ(v.depart_ns, 4000u);
  EXPECT_EQ(q.ctr.frames, 4u);
  EXPECT_EQ(q.ctr.marked, 1u);
  EXPECT_EQ(q.ctr.dropped, 1u);
  EXPECT_EQ(q.queue_bytes(4000), 0u);
}

// ---- On the pair, under the virtual clock ------------------------------------------------------

// A CNP as B's QP would send it to A's QP.
proto::Packet cnp_to_a(Pair& pr) {
  proto::Packet c = forge(pr.b, pr.a, op::kCnp, 0);
  c.ack_req = false;
  c.becn = true;
  return c;
}

TEST(CcPair, AQpWithoutCongestionControlHasNoReactionPoint) {
  Pair pr;
  EXPECT_EQ(pr.a.qp->cc, nullptr);
  inject(pr.wire.a(), cnp_to_a(pr));
  pr.a.dev->progress();
  EXPECT_EQ(pr.a.qp->counters().cnp_rcvd, 1u);
  EXPECT_EQ(pr.a.qp->cc, nullptr);
}

// Sends `len` bytes with one WRITE from A to B; returns the virtual times at which A's frames
// went out.
struct Sent {
  std::vector<uint64_t> at;    // virtual ns
  std::vector<uint32_t> len;   // bytes
};
Sent write_and_time(Pair& pr, uint32_t len) {
  Sent at;
  pr.wire.a().tap = [&](const uint8_t*, uint32_t n) {
    at.at.push_back(pr.wire.clock().now_ns());
    at.len.push_back(n);
  };
  std::vector<uint8_t> src(len);
  fill_pattern(src.data(), src.size(), 7);
  Mr* mr = pr.a.dev->reg_mr(pr.a.pd, src.data(), src.size(), kLocalWrite);
  Sge s{reinterpret_cast<uintptr_t>(src.data()), len, mr->lkey};
  EXPECT_EQ(pr.a.dev->post_send(pr.a.qp, wr_to(pr.b, 1, WrOpcode::RdmaWrite, &s)), 0);
  Wc wc;
  EXPECT_TRUE(pr.next_wc(pr.a.scq, wc));
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(std::memcmp(pr.b.buf(), src.data(), len), 0);
  pr.wire.a().tap = nullptr;
  return at;
}

// DCQCN whose first CNP cuts to about 1 Gbit/s and stays there (no increase, no burst).
void dcqcn_cut_to_1g(Device::Config& c) {
  c.cc.algo = cc::Algo::Dcqcn;
  c.cc.dcqcn.rate_to_set_on_first_cnp = 2'000;
  c.cc.dcqcn.rpg_time_reset = 1'000'000;
  c.cc.dcqcn.rpg_byte_reset = 0;
  c.cc.burst_bytes = 1;
}

// Each frame waited until the ones before it had gone at `rate` (the first went at once).
void expect_paced(const Sent& s, double rate) {
  double bytes = 0;
  for (size_t i = 0; i + 1 < s.len.size(); ++i) bytes += s.len[i];
  const double want_ns = bytes * 8e9 / rate;
  const double got_ns = double(s.at.back() - s.at.front());
  EXPECT_GE(got_ns, want_ns * 0.99);
  EXPECT_LE(got_ns, want_ns * 1.05);
}

TEST(CcPair, ACnpPacesTheQpAtItsNewRate) {
  PairOptions o;
  o.config_a = dcqcn_cut_to_1g;
  Pair pr(o);
  ASSERT_NE(pr.a.qp->cc, nullptr);
  // Unlimited: the WRITE's frames leave back to back.
  const Sent fast = write_and_time(pr, 64 * 1024);
  ASSERT_GE(fast.at.size(), 64u);
  EXPECT_EQ(fast.at.back() - fast.at.front(), 0u) << "no pacing before the first CNP";
  inject(pr.wire.a(), cnp_to_a(pr));
  pr.a.dev->progress();
  ASSERT_TRUE(pr.a.qp->cc->limited());
  EXPECT_EQ(pr.a.qp->cc->last().rule, Rule::FirstCnp);
  const double rate = pr.a.qp->cc->rate_bps();
  EXPECT_NEAR(rate, 1 * kGbps, 0.01 * kGbps);
  // What uroce-stat shows of the QP (telemetry): the rate and the algorithm's state.
  const QpInfo info = qp_info(*pr.a.qp);
  EXPECT_EQ(info.cc_rate_mbps, uint64_t(rate / 1e6));
  EXPECT_EQ(info.cc.rfind("dcqcn rate 1.001 Gbit/s", 0), 0u) << info.cc;
  EXPECT_EQ(qp_info(*pr.b.qp).cc, "off");
  const Sent slow = write_and_time(pr, 64 * 1024);
  const Counters& qc = pr.a.qp->counters();
  ASSERT_EQ(slow.at.size(), fast.at.size()) << "resent " << qc.retransmitted << " probes " << qc.probes
                                            << " timeouts " << qc.timeouts;

  expect_paced(slow, rate);
  EXPECT_GT(pr.a.qp->counters().cnp_rcvd, 0u);
}

// A capture's note of each CNP (Link::note): the QP, the rate before and after, the rule. Only a
// link that wants notes gets text; a second CNP within rate_reduce_monitor_period leaves the
// rate as it is, and says so.
TEST(CcPair, EachCnpIsNotedForTheCaptureWithTheRateItLeft) {
  PairOptions o;
  o.config_a = [](Device::Config& c) {
    dcqcn_cut_to_1g(c);
    c.cc.dcqcn.rate_reduce_monitor_period = 1'000;
  };
  Pair pr(o);
  inject(pr.wire.a(), cnp_to_a(pr));
  pr.a.dev->progress();
  EXPECT_TRUE(pr.wire.a().notes.empty()) << "no notes for a link that does not want them";
  pr.wire.a().keep_notes = true;
  inject(pr.wire.a(), cnp_to_a(pr));
  pr.a.dev->progress();
  ASSERT_EQ(pr.wire.a().notes.size(), 1u);
  char qp[16];
  std::snprintf(qp, sizeof qp, "QP 0x%06x", pr.a.qp->qpn());
  EXPECT_EQ(pr.wire.a().notes[0].rfind(std::string(qp) + " cc=dcqcn: CNP 2: rate 1.00 -> 1.00 Gbit/s (unchanged)", 0), 0u)
      << pr.wire.a().notes[0];
  pr.wire.clock().advance(2'000'000);  // past the monitor period: the next CNP cuts
  inject(pr.wire.a(), cnp_to_a(pr));
  pr.a.dev->progress();
  ASSERT_EQ(pr.wire.a().notes.size(), 2u);
  char want[128];
  std::snprintf(want, sizeof want, "%s cc=dcqcn: CNP 3: rate 1.00 -> %.2f Gbit/s (cut), alpha ", qp,
                pr.a.qp->cc->rate_bps() / 1e9);
  EXPECT_LT(pr.a.qp->cc->rate_bps(), 1 * kGbps);
  EXPECT_EQ(pr.a.qp->cc->last().rule, Rule::Cut);
  EXPECT_EQ(pr.wire.a().notes[1].rfind(want, 0), 0u) << pr.wire.a().notes[1] << "\n want " << want;
}

// READ responses are paced too: B's QP sends them, so a CNP for marked responses comes to B's
// QP (their sender), and B's one rate covers them as it covers its requests. A's READ of 64 KiB
// from B: back to back before the CNP, at B's new rate after it, the bytes intact.
TEST(CcPair, ACnpPacesTheResponderSReadResponses) {
  PairOptions o;
  o.config_b = dcqcn_cut_to_1g;
  Pair pr(o);
  ASSERT_NE(pr.b.qp->cc, nullptr);
  const uint32_t len = 64 * 1024;
  for (uint32_t i = 0; i < len; ++i) pr.b.buf()[i] = uint8_t(i * 13 + 5);
  std::vector<uint8_t> dst(len);
  Mr* mr = pr.a.dev->reg_mr(pr.a.pd, dst.data(), dst.size(), kLocalWrite);
  auto read_and_time = [&] {
    Sent at;
    pr.wire.b().tap = [&](const uint8_t*, uint32_t n) {
      at.at.push_back(pr.wire.clock().now_ns());
      at.len.push_back(n);
    };
    std::fill(dst.begin(), dst.end(), 0);
    Sge sg{reinterpret_cast<uintptr_t>(dst.data()), len, mr->lkey};
    EXPECT_EQ(pr.a.dev->post_send(pr.a.qp, wr_to(pr.b, 1, WrOpcode::RdmaRead, &sg)), 0);
    Wc wc;
    EXPECT_TRUE(pr.next_wc(pr.a.scq, wc));
    EXPECT_EQ(wc.status, WcStatus::Success);
    EXPECT_EQ(std::memcmp(dst.data(), pr.b.buf(), len), 0);
    pr.wire.b().tap = nullptr;
    return at;
  };
  const Sent fast = read_and_time();
  ASSERT_EQ(fast.at.size(), 64u);  // 64 responses of 1 KiB
  EXPECT_EQ(fast.at.back() - fast.at.front(), 0u) << "no pacing before the first CNP";
  proto::Packet c = forge(pr.a, pr.b, op::kCnp, 0);  // as A's QP sends it to B's
  c.ack_req = false;
  c.becn = true;
  inject(pr.wire.b(), c);
  pr.b.dev->progress();
  ASSERT_TRUE(pr.b.qp->cc->limited());
  const double rate = pr.b.qp->cc->rate_bps();
  EXPECT_NEAR(rate, 1 * kGbps, 0.01 * kGbps);
  const Sent slow = read_and_time();
  ASSERT_EQ(slow.at.size(), fast.at.size()) << "resent " << pr.a.qp->counters().retransmitted;
  expect_paced(slow, rate);
  EXPECT_EQ(pr.a.qp->counters().timeouts, 0u);
}

// The whole loop: A's frames are ECN-capable, the bottleneck marks them, B answers with CNPs, A's
// reaction point cuts, and the WRITEs still land whole.
TEST(CcPair, MarksAtABottleneckComeBackAsCnpsThatCutTheRate) {
  PairOptions o;
  o.config_a = [](Device::Config& c) {
    c.cc.algo = cc::Algo::Dcqcn;
    c.ecn = 2;
  };
  Pair pr(o);
  pr.wire.a().bottleneck.rate_bps = 1'000'000'000;
  pr.wire.a().bottleneck.mark_bytes = 8 * 1024;
  write_and_time(pr, 64 * 1024);
  EXPECT_GT(pr.wire.a().congestion.ctr.marked, 0u);
  EXPECT_EQ(pr.wire.a().congestion.ctr.dropped, 0u);
  EXPECT_GT(pr.b.qp->counters().ecn_ce_rcvd, 0u);
  EXPECT_GT(pr.b.qp->counters().cnp_sent, 0u);
  EXPECT_EQ(pr.a.qp->counters().cnp_rcvd, pr.b.qp->counters().cnp_sent);
  EXPECT_EQ(pr.a.qp->cc->cnps(), pr.a.qp->counters().cnp_rcvd);
  EXPECT_EQ(pr.a.qp->cc->changes(Rule::FirstCnp), 1u);
}

// A forged CNP cannot slow a QP down: from an address other than its peer's, or with another
// P_Key, it is a counted drop before the reaction point hears of it.
TEST(CcPair, ForgedCnpsAreDroppedBeforeTheReactionPoint) {
  PairOptions o;
  o.config_a = [](Device::Config& c) { c.cc.algo = cc::Algo::Dcqcn; };
  Pair pr(o);
  proto::Packet spoofed = cnp_to_a(pr);
  spoofed.ip_src[3] ^= 0x01;  // another sender (IPv4: the first four bytes)
  inject(pr.wire.a(), spoofed);
  proto::Packet wrong_pkey = cnp_to_a(pr);
  wrong_pkey.pkey = 0x7123;
  inject(pr.wire.a(), wrong_pkey);
  pr.a.dev->progress();
  const Counters c = pr.a.dev->counters();
  EXPECT_EQ(c.dropped_source, 1u);
  EXPECT_EQ(c.dropped_pkey, 1u);
  EXPECT_EQ(pr.a.qp->counters().cnp_rcvd, 0u);
  EXPECT_EQ(pr.a.qp->cc->cnps(), 0u);
  EXPECT_FALSE(pr.a.qp->cc->limited());
}

TEST(CcPair, TheRateRecoversAndTheQpIsReleased) {
  PairOptions o;
  o.config_a = [](Device::Config& c) { c.cc.algo = cc::Algo::Dcqcn; };
  Pair pr(o);
  inject(pr.wire.a(), cnp_to_a(pr));
  pr.a.dev->progress();
  ASSERT_TRUE(pr.a.qp->cc->limited());
  // Traffic keeps the timer and the byte counter going until the limiter is released.
  for (int i = 0; i < 200 && pr.a.qp->cc->limited(); ++i) write_and_time(pr, 64 * 1024);
  EXPECT_FALSE(pr.a.qp->cc->limited());
  EXPECT_GT(pr.a.qp->cc->changes(Rule::FastRecovery), 0u);
  EXPECT_GT(pr.a.qp->cc->changes(Rule::AdditiveIncrease) + pr.a.qp->cc->changes(Rule::HyperIncrease), 0u);
  EXPECT_EQ(pr.a.qp->cc->changes(Rule::Release), 1u);
}

}  // namespace
}  // namespace uroce::test
