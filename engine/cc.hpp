// Congestion control: the reaction point of a QP (RoCEv2 Annex A17.9 leaves it to the sender).
//
// A QP that runs an algorithm has a ReactionPoint: the algorithm hears what happens (a CNP came,
// an ACK measured a round trip, bytes went out, time passed) and sets the rate the QP may send
// at; the pacer in the same object holds the QP's packets to that rate (a token bucket). One
// algorithm per file: cc_dcqcn.cpp (ECN: CNPs), cc_timely.cpp (delay: round-trip times).
//
// A QP without congestion control has no ReactionPoint at all (Qp::cc is null): the requester
// pays one pointer test per packet. An algorithm's timers run lazily: whoever asks (may_send,
// an event) first catches its clocks up to now, so nothing is scanned and nothing is scheduled
// while the QP sends nothing. Every rate change is named by the rule that made it (Rule), for
// the tests, the counters and the pictures (docs/congestion.md).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/param.hpp"

namespace uroce::engine::cc {

enum class Algo : uint8_t { Off, Dcqcn, Timely };
std::string_view algo_name(Algo a);
bool algo_from_name(std::string_view s, Algo& out);

// The rules that change a rate.
enum class Rule : uint8_t {
  // DCQCN (Zhu et al., SIGCOMM 2015, and the ConnectX's knobs)
  FirstCnp,          // the first CNP: a limiter at rate_to_set_on_first_cnp (or the line rate), then cut
  Cut,               // a CNP: rate * (1 - alpha * 1024 / 2^rpg_gd), at most once per rate_reduce_monitor_period
  FastRecovery,      // a timer or byte stage, both stages below rpg_threshold: rate halfway to the target
  AdditiveIncrease,  // one stage at rpg_threshold or above: target + rpg_ai_rate, rate halfway
  HyperIncrease,     // both above: target + i * rpg_hai_rate (i = the smaller stage - rpg_threshold)
  Release,           // the rate reached the maximum: the limiter is released (no pacing)
  // TIMELY (Mittal et al., SIGCOMM 2015)
  TimelyLowRtt,      // rtt < t_low: rate + delta
  TimelyHighRtt,     // rtt > t_high: rate * (1 - beta * (1 - t_high / rtt))
  TimelyGradientUp,  // gradient <= 0: rate + N * delta (N = 5 after 5 such samples in a row)
  TimelyGradientDown,// gradient > 0: rate * (1 - beta * gradient)
  kCount
};
std::string_view rule_name(Rule r);

struct DcqcnParams {
  uint32_t rpg_time_reset = param::kRpgTimeResetUs;
  uint32_t rpg_byte_reset = param::kRpgByteResetBytes;
  uint32_t rpg_threshold = param::kRpgThreshold;
  uint32_t rpg_max_rate = param::kRpgMaxRateMbps;
  uint32_t rpg_ai_rate = param::kRpgAiRateMbps;
  uint32_t rpg_hai_rate = param::kRpgHaiRateMbps;
  uint32_t rpg_gd = param::kRpgGd;
  uint32_t rpg_min_dec_fac = param::kRpgMinDecFac;
  uint32_t rpg_min_rate = param::kRpgMinRateMbps;
  uint32_t rate_to_set_on_first_cnp = param::kRateToSetOnFirstCnpMbps;
  uint32_t dce_tcp_g = param::kDceTcpG;
  uint32_t dce_tcp_rtt = param::kDceTcpRttUs;
  uint32_t rate_reduce_monitor_period = param::kRateReduceMonitorPeriodUs;
  uint32_t initial_alpha_value = param::kInitialAlphaValue;
  bool clamp_tgt_rate = param::kClampTgtRate;
  bool clamp_tgt_rate_after_time_inc = param::kClampTgtRateAfterTimeInc;
};

struct TimelyParams {
  uint32_t t_low_us = param::kTimelyTLowUs;
  uint32_t t_high_us = param::kTimelyTHighUs;
  uint32_t min_rtt_us = param::kTimelyMinRttUs;
  uint32_t add_step_mbps = param::kTimelyAddStepMbps;
  uint32_t beta = param::kTimelyBeta;      // per mille
  uint32_t alpha = param::kTimelyAlpha;    // per mille
  uint32_t hai_after = param::kTimelyHaiAfter;
};

struct Config {
  Algo algo = Algo::Off;
  uint32_t line_rate_mbps = param::kCcLineRateMbps;
  uint32_t burst_bytes = param::kPaceBurstBytes;
  DcqcnParams dcqcn;
  TimelyParams timely;
  // Per QP, for experiments (key cc_per_qp = dcqcn,timely,...): the device's QPs take these in
  // turn, in the order they were made (the first QP the first, ...; round again after the
  // last), instead of `algo`. Empty: every QP `algo`.
  std::vector<Algo> per_qp;
};

// Sets one key of `c` ("cc", "cc_line_rate", a DCQCN key by its mlx5 name, "timely_*"). False
// with `msg` for a bad value; `unknown` when the key is none of these. The port's config file
// and the environment (UROCE_CC, UROCE_RPG_AI_RATE, ...) go through here.
bool set_key(Config& c, std::string_view key, std::string_view val, std::string& msg, bool& unknown);
std::vector<std::string> keys();

// One rate change.
struct Change {
  uint64_t ns = 0;
  Rule rule = Rule::kCount;
  double rate_bps = 0;
  double target_bps = 0;
};

class ReactionPoint {
 public:
  explicit ReactionPoint(const Config& c);
  virtual ~ReactionPoint() = default;
  Algo algo() const { return algo_; }

  // What happens to the QP.
  virtual void on_cnp(uint64_t now) { (void)now; }
  virtual void on_rtt(uint64_t now, uint64_t rtt_ns) { (void)now, (void)rtt_ns; }

  // The pacer. may_send: may a packet go now (the algorithm's clocks caught up to now first)?
  // sent: `bytes` (the frame's) went at `now`. send_at: when may_send says yes again.
  bool may_send(uint64_t now) {
    advance(now);
    return !limited_ || now >= next_ns_;
  }
  void sent(uint64_t now, uint32_t bytes);
  // Catches the algorithm's timers up to `now` (what may_send and the events do first): the
  // rate a CNP finds, for a note of what it did.
  void catch_up(uint64_t now) { advance(now); }
  uint64_t send_at() const { return limited_ ? next_ns_ : 0; }

  bool limited() const { return limited_; }
  double rate_bps() const { return limited_ ? rate_ : line_; }
  virtual double target_bps() const { return rate_bps(); }
  virtual double alpha() const { return 0; }  // DCQCN's congestion estimate (0..1); 0 for others
  // One line for uroce-stat and logs: the rate, and the algorithm's own state.
  virtual std::string describe() const = 0;
  // The state's name (what the next change will be): "unlimited", "fast recovery", ...
  virtual std::string_view state() const = 0;

  const Change& last() const { return last_; }
  uint64_t changes(Rule r) const { return counts_[size_t(r)]; }
  uint64_t cnps() const { return cnps_; }
  // Every change is appended here when set (benches and tests; nullptr: none kept).
  std::vector<Change>* log = nullptr;

 protected:
  // Catches the algorithm's timers up to `now` (in time order). Nothing by default.
  virtual void advance(uint64_t now) { (void)now; }
  virtual void on_bytes(uint64_t now, uint32_t bytes) { (void)now, (void)bytes; }
  // A new rate (and target) by `rule`; at or above max_bps, the limiter is released.
  void set_rate(uint64_t ns, Rule rule, double rate, double target);
  void release(uint64_t ns);

  Algo algo_;
  double line_;            // bit/s
  double max_;             // bit/s: the limiter is released at this rate
  double min_;             // bit/s: never below
  uint32_t burst_;         // bytes
  bool limited_ = false;
  double rate_ = 0;        // bit/s, while limited
  uint64_t next_ns_ = 0;   // the pacer: the next packet's time
  uint64_t cnps_ = 0;
  Change last_{};
  std::array<uint64_t, size_t(Rule::kCount)> counts_{};
};

// The QP's reaction point for `c`; nullptr when c.algo is Off.
// `qp_index`: the QP's place in the order the device made its QPs (Config::per_qp).
std::unique_ptr<ReactionPoint> make(const Config& c, uint32_t qp_index = 0);

}  // namespace uroce::engine::cc
