// TIMELY's reaction point: Mittal et al., "TIMELY: RTT-based Congestion Control for the
// Datacenter" (SIGCOMM 2015, Algorithm 1), on the round-trip times the engine already measures
// (one timed AckReq packet at a time: engine/recovery.cpp). No ECN, no CNP: queues show as delay.
//
//   each RTT sample:  diff = (1 - alpha) * diff + alpha * (rtt - previous rtt)
//                     gradient = diff / min_rtt
//     rtt < t_low      rate += delta                               (low RTT)
//     rtt > t_high     rate *= 1 - beta * (1 - t_high / rtt)       (high RTT)
//     gradient <= 0    rate += N * delta, N = 5 after hai_after such samples in a row, else 1  (gradient up)
//     gradient > 0     rate *= 1 - beta * min(gradient, 1)         (gradient down)
//   at the line rate the limiter is released; it starts again at the first cut.
#include <algorithm>
#include <cstdio>

#include "engine/cc.hpp"

namespace uroce::engine::cc {

namespace {

class Timely final : public ReactionPoint {
 public:
  explicit Timely(const Config& c) : ReactionPoint(c), p_(c.timely) {}

  void on_rtt(uint64_t now, uint64_t rtt_ns) override {
    const double rtt = double(rtt_ns);
    if (prev_rtt_ == 0) {
      prev_rtt_ = rtt;
      return;
    }
    const double a = double(p_.alpha) / 1000, beta = double(p_.beta) / 1000;
    diff_ = (1 - a) * diff_ + a * (rtt - prev_rtt_);
    prev_rtt_ = rtt;
    const double gradient = diff_ / (double(p_.min_rtt_us) * 1000);
    const double delta = double(p_.add_step_mbps) * 1e6;
    double r = rate_bps();
    Rule rule;
    if (rtt < double(p_.t_low_us) * 1000) {
      rule = Rule::TimelyLowRtt;
      r += delta;
      falling_ = 0;
    } else if (rtt > double(p_.t_high_us) * 1000) {
      rule = Rule::TimelyHighRtt;
      r *= 1 - beta * (1 - double(p_.t_high_us) * 1000 / rtt);
      falling_ = 0;
    } else if (gradient <= 0) {
      rule = Rule::TimelyGradientUp;
      const uint32_t n = ++falling_ >= p_.hai_after ? p_.hai_after : 1;
      r += n * delta;
    } else {
      rule = Rule::TimelyGradientDown;
      r *= 1 - beta * std::min(1.0, gradient);  // a gradient above 1 cuts as 1 does (the paper's stays below)
      falling_ = 0;
    }
    last_rule_ = rule;
    if (r >= max_) {
      if (limited_) release(now);
      return;
    }
    set_rate(now, rule, r, r);
  }

  std::string_view state() const override { return limited_ ? rule_name(last_rule_) : "unlimited"; }

  std::string describe() const override {
    char b[160];
    std::snprintf(b, sizeof b, "timely %s %.3f Gbit/s rtt %.1f us gradient %.3f", limited_ ? "rate" : "unlimited",
                  rate_bps() / 1e9, prev_rtt_ / 1000, diff_ / (double(p_.min_rtt_us) * 1000));
    return b;
  }

 private:
  TimelyParams p_;
  double prev_rtt_ = 0;   // ns; 0: no sample yet
  double diff_ = 0;       // ns, smoothed
  uint32_t falling_ = 0;  // samples in a row with gradient <= 0
  Rule last_rule_ = Rule::TimelyLowRtt;
};

}  // namespace

std::unique_ptr<ReactionPoint> make_timely(const Config& c) { return std::make_unique<Timely>(c); }

}  // namespace uroce::engine::cc
