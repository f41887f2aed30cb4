// DCQCN's reaction point: Zhu et al., "Congestion Control for Large-Scale RDMA Deployments"
// (SIGCOMM 2015, section 3 and Figure 7), with the knobs a ConnectX exposes (mlx5's roce_rp keys,
// same names, units and defaults: engine/param.hpp; docs/congestion.md).
//
//   unlimited --CNP--> first CNP: rate = rate_to_set_on_first_cnp (0: the maximum), target = rate,
//                      alpha = initial_alpha_value / 1024, then a cut
//   cut        rate = rate * (1 - alpha * 1024 / 2^rpg_gd), at least rate * rpg_min_dec_fac / 100
//              and rpg_min_rate. The target becomes the rate before the cut on the first CNP, with
//              clamp_tgt_rate, or with clamp_tgt_rate_after_time_inc once the timer has raised the
//              rate since the last cut. The stages, the byte counter and the timer start again.
//              At most one cut per rate_reduce_monitor_period: a CNP inside it cuts at its end.
//   alpha      every dce_tcp_rtt: alpha = g * alpha + (1 - g) * [a CNP came in that period],
//              g = dce_tcp_g / 1024
//   increases  the timer (each rpg_time_reset without a cut: stage T) and the byte counter (each
//              rpg_byte_reset bytes sent: stage BC); with T and BC counted before this increase
//              and F = rpg_threshold:
//                max(T, BC) < F   fast recovery      rate = (target + rate) / 2
//                min(T, BC) > F   hyper increase     target += (min(T, BC) - F) * rpg_hai_rate, then the same
//                otherwise        additive increase  target += rpg_ai_rate, then the same
//              the target never above the maximum (rpg_max_rate, 0: the line rate); a rate within
//              rpg_ai_rate of it releases the limiter: the QP is unlimited until the next CNP.
//
// Every timer runs lazily: advance() replays, in time order, what happened since it last ran.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/cc.hpp"

namespace uroce::engine::cc {

namespace {

class Dcqcn final : public ReactionPoint {
 public:
  explicit Dcqcn(const Config& c) : ReactionPoint(c), p_(c.dcqcn) {}

  void on_cnp(uint64_t now) override {
    ++cnps_;
    advance(now);  // the timers up to now first: they may have released the limiter meanwhile
    if (!limited_) {
      const double first = p_.rate_to_set_on_first_cnp ? double(p_.rate_to_set_on_first_cnp) * 1e6 : max_;
      rate_ = std::min(first, max_);
      target_ = rate_;
      alpha_ = double(p_.initial_alpha_value) / 1024;
      alpha_ref_ = now;
      cnp_in_period_ = false;
      cut(now, Rule::FirstCnp);
      return;
    }
    cnp_in_period_ = true;
    if (now >= cut_ns_ + period_ns(p_.rate_reduce_monitor_period)) cut(now, Rule::Cut);
    else cut_pending_ = true;
  }

  double target_bps() const override { return limited_ ? target_ : line_; }
  double alpha() const override { return alpha_; }

  std::string_view state() const override {
    if (!limited_) return "unlimited";
    const uint32_t f = p_.rpg_threshold;
    if (std::max(t_, bc_) < f) return "fast recovery";
    if (std::min(t_, bc_) > f) return "hyper increase";
    return "additive increase";
  }

  std::string describe() const override {
    char b[160];
    if (!limited_) std::snprintf(b, sizeof b, "dcqcn unlimited (%.3f Gbit/s), %llu CNPs", line_ / 1e9, (unsigned long long)cnps_);
    else
      std::snprintf(b, sizeof b, "dcqcn rate %.3f Gbit/s target %.3f alpha %.3f T %u BC %u next: %.*s", rate_ / 1e9,
                    target_ / 1e9, alpha_, t_, bc_, int(state().size()), state().data());
    return b;
  }

 protected:
  void advance(uint64_t now) override {
    if (!limited_) return;
    const uint64_t reset = period_ns(p_.rpg_time_reset);
    for (uint32_t guard = 0; limited_ && guard < 1'000'000; ++guard) {
      const uint64_t pending = cut_pending_ ? cut_ns_ + period_ns(p_.rate_reduce_monitor_period) : UINT64_MAX;
      const uint64_t timer = timer_ref_ + reset;
      const uint64_t next = std::min(pending, timer);
      if (next > now) break;
      alpha_to(next);
      if (pending <= timer) {
        cut(pending, Rule::Cut);
      } else {
        timer_ref_ = timer;
        increase(timer, true);
      }
    }
    alpha_to(now);
  }

  void on_bytes(uint64_t now, uint32_t bytes) override {
    if (!limited_ || p_.rpg_byte_reset == 0) return;
    bytes_ += bytes;
    while (limited_ && bytes_ >= p_.rpg_byte_reset) {
      bytes_ -= p_.rpg_byte_reset;
      increase(now, false);
    }
  }

 private:
  static uint64_t period_ns(uint32_t us) { return uint64_t(us) * 1000; }

  // Alpha's updates for the periods of dce_tcp_rtt that ended by `t`.
  void alpha_to(uint64_t t) {
    const uint64_t period = period_ns(p_.dce_tcp_rtt);
    if (t < alpha_ref_ + period) return;
    const uint64_t n = (t - alpha_ref_) / period;
    const double g = double(p_.dce_tcp_g) / 1024;
    alpha_ = g * alpha_ + (cnp_in_period_ ? 1 - g : 0);  // the period the last CNP came in
    cnp_in_period_ = false;
    if (n > 1) alpha_ *= std::pow(g, double(n - 1));     // the quiet ones after it
    alpha_ref_ += n * period;
  }

  void cut(uint64_t t, Rule rule) {
    const double before = rate_;
    if (rule == Rule::FirstCnp || p_.clamp_tgt_rate || (p_.clamp_tgt_rate_after_time_inc && timer_raised_)) target_ = before;
    const double by_alpha = 1 - alpha_ * 1024 / double(1u << p_.rpg_gd);
    const double factor = std::max(by_alpha, double(p_.rpg_min_dec_fac) / 100);
    cut_ns_ = t;
    cut_pending_ = false;
    t_ = bc_ = 0;
    bytes_ = 0;
    timer_ref_ = t;
    timer_raised_ = false;
    set_rate(t, rule, before * factor, target_);
  }

  void increase(uint64_t t, bool by_timer) {
    const uint32_t f = p_.rpg_threshold;
    Rule rule;
    if (std::max(t_, bc_) < f) {
      rule = Rule::FastRecovery;
    } else if (std::min(t_, bc_) > f) {
      rule = Rule::HyperIncrease;
      target_ = std::min(max_, target_ + double(std::min(t_, bc_) - f) * p_.rpg_hai_rate * 1e6);
    } else {
      rule = Rule::AdditiveIncrease;
      target_ = std::min(max_, target_ + double(p_.rpg_ai_rate) * 1e6);
    }
    if (by_timer) ++t_, timer_raised_ = true;
    else ++bc_;
    const double rate = (target_ + rate_) / 2;
    if (rate >= max_ - std::max(1e6, double(p_.rpg_ai_rate) * 1e6)) release(t);
    else set_rate(t, rule, rate, target_);
  }

  DcqcnParams p_;
  double target_ = 0;
  double alpha_ = 0;
  uint64_t alpha_ref_ = 0;   // the start of alpha's current period
  bool cnp_in_period_ = false;
  uint64_t cut_ns_ = 0;      // the last cut
  bool cut_pending_ = false; // a CNP came within rate_reduce_monitor_period of it
  uint64_t timer_ref_ = 0;   // the rate increase timer runs from here
  uint64_t bytes_ = 0;       // the byte counter
  uint32_t t_ = 0, bc_ = 0;  // timer and byte stages since the last cut
  bool timer_raised_ = false;
};

}  // namespace

std::unique_ptr<ReactionPoint> make_dcqcn(const Config& c) { return std::make_unique<Dcqcn>(c); }

}  // namespace uroce::engine::cc
