// The reaction point's common part: names, the keys, the pacer, and the choice of algorithm.
#include "engine/cc.hpp"

#include <algorithm>
#include <charconv>

namespace uroce::engine::cc {

std::unique_ptr<ReactionPoint> make_dcqcn(const Config& c);   // cc_dcqcn.cpp
std::unique_ptr<ReactionPoint> make_timely(const Config& c);  // cc_timely.cpp

std::string_view algo_name(Algo a) {
  switch (a) {
    case Algo::Dcqcn: return "dcqcn";
    case Algo::Timely: return "timely";
    default: return "off";
  }
}

bool algo_from_name(std::string_view s, Algo& out) {
  for (Algo a : {Algo::Off, Algo::Dcqcn, Algo::Timely})
    if (s == algo_name(a)) {
      out = a;
      return true;
    }
  return false;
}

std::string_view rule_name(Rule r) {
  switch (r) {
    case Rule::FirstCnp: return "first CNP";
    case Rule::Cut: return "cut";
    case Rule::FastRecovery: return "fast recovery";
    case Rule::AdditiveIncrease: return "additive increase";
    case Rule::HyperIncrease: return "hyper increase";
    case Rule::Release: return "release";
    case Rule::TimelyLowRtt: return "low RTT";
    case Rule::TimelyHighRtt: return "high RTT";
    case Rule::TimelyGradientUp: return "gradient up";
    case Rule::TimelyGradientDown: return "gradient down";
    default: return "?";
  }
}

namespace {

struct Key {
  const char* name;
  uint32_t lo, hi;
  uint32_t DcqcnParams::* d;   // one of the two is set
  uint32_t TimelyParams::* t;
};
// DCQCN's keys carry mlx5's names (roce_rp) and units: us, bytes, Mbit/s, 1/1024.
const Key kKeys[] = {
    {"rpg_time_reset", 1, 10'000'000, &DcqcnParams::rpg_time_reset, nullptr},
    {"rpg_byte_reset", 0, 1u << 30, &DcqcnParams::rpg_byte_reset, nullptr},
    {"rpg_threshold", 0, 31, &DcqcnParams::rpg_threshold, nullptr},
    {"rpg_max_rate", 0, 10'000'000, &DcqcnParams::rpg_max_rate, nullptr},
    {"rpg_ai_rate", 0, 1'000'000, &DcqcnParams::rpg_ai_rate, nullptr},
    {"rpg_hai_rate", 0, 1'000'000, &DcqcnParams::rpg_hai_rate, nullptr},
    {"rpg_gd", 0, 15, &DcqcnParams::rpg_gd, nullptr},
    {"rpg_min_dec_fac", 1, 100, &DcqcnParams::rpg_min_dec_fac, nullptr},
    {"rpg_min_rate", 1, 10'000'000, &DcqcnParams::rpg_min_rate, nullptr},
    {"rate_to_set_on_first_cnp", 0, 10'000'000, &DcqcnParams::rate_to_set_on_first_cnp, nullptr},
    {"dce_tcp_g", 0, 1024, &DcqcnParams::dce_tcp_g, nullptr},
    {"dce_tcp_rtt", 1, 10'000'000, &DcqcnParams::dce_tcp_rtt, nullptr},
    {"rate_reduce_monitor_period", 0, 10'000'000, &DcqcnParams::rate_reduce_monitor_period, nullptr},
    {"initial_alpha_value", 0, 1023, &DcqcnParams::initial_alpha_value, nullptr},
    {"timely_t_low", 1, 10'000'000, nullptr, &TimelyParams::t_low_us},
    {"timely_t_high", 1, 10'000'000, nullptr, &TimelyParams::t_high_us},
    {"timely_min_rtt", 1, 10'000'000, nullptr, &TimelyParams::min_rtt_us},
    {"timely_add_step", 0, 1'000'000, nullptr, &TimelyParams::add_step_mbps},
    {"timely_beta", 0, 1000, nullptr, &TimelyParams::beta},
    {"timely_alpha", 0, 1000, nullptr, &TimelyParams::alpha},
    {"timely_hai_after", 1, 1000, nullptr, &TimelyParams::hai_after},
};

bool parse_u32(std::string_view s, uint32_t& out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
}

}  // namespace

bool set_key(Config& c, std::string_view key, std::string_view val, std::string& msg, bool& unknown) {
  unknown = false;
  uint32_t u = 0;
  if (key == "cc") {
    if (!algo_from_name(val, c.algo)) return msg = "cc is off, dcqcn or timely", false;
    return true;
  }
  if (key == "cc_per_qp") {
    std::vector<Algo> v;
    for (size_t a = 0; a <= val.size();) {
      const size_t b = std::min(val.find(',', a), val.size());
      Algo x;
      if (!algo_from_name(val.substr(a, b - a), x)) return msg = "cc_per_qp is a list of off, dcqcn and timely (dcqcn,off)", false;
      v.push_back(x);
      a = b + 1;
    }
    c.per_qp = std::move(v);
    return true;
  }
  if (key == "cc_line_rate") {
    if (!parse_u32(val, u) || u < 1) return msg = "bad cc_line_rate (Mbit/s, 1..)", false;
    c.line_rate_mbps = u;
    return true;
  }
  if (key == "clamp_tgt_rate" || key == "clamp_tgt_rate_after_time_inc") {
    if (val != "0" && val != "1") return msg = std::string(key) + " is 0 or 1", false;
    (key == "clamp_tgt_rate" ? c.dcqcn.clamp_tgt_rate : c.dcqcn.clamp_tgt_rate_after_time_inc) = val == "1";
    return true;
  }
  for (const Key& k : kKeys) {
    if (key != k.name) continue;
    if (!parse_u32(val, u) || u < k.lo || u > k.hi) {
      msg = "bad " + std::string(key) + " (" + std::to_string(k.lo) + ".." + std::to_string(k.hi) + ")";
      return false;
    }
    if (k.d) c.dcqcn.*k.d = u;
    else c.timely.*k.t = u;
    return true;
  }
  unknown = true;
  return false;
}

std::vector<std::string> keys() {
  std::vector<std::string> v = {"cc", "cc_per_qp", "cc_line_rate", "clamp_tgt_rate", "clamp_tgt_rate_after_time_inc"};
  for (const Key& k : kKeys) v.emplace_back(k.name);
  return v;
}

ReactionPoint::ReactionPoint(const Config& c)
    : algo_(c.algo),
      line_(double(c.line_rate_mbps) * 1e6),
      max_(c.dcqcn.rpg_max_rate ? std::min(line_, double(c.dcqcn.rpg_max_rate) * 1e6) : line_),
      min_(double(std::max<uint32_t>(c.dcqcn.rpg_min_rate, 1)) * 1e6),
      burst_(c.burst_bytes) {}

// The token bucket: a packet may go when the bucket's time has come; it pushes the time on by
// its own length at the rate. After an idle time the bucket holds at most burst_ bytes.
void ReactionPoint::sent(uint64_t now, uint32_t bytes) {
  advance(now);  // the algorithm's timers before the bytes (a resend comes without may_send)
  if (limited_) {
    const double ns_per_byte = 8e9 / rate_;
    const uint64_t burst_ns = uint64_t(burst_ * ns_per_byte);
    const uint64_t from = now > burst_ns ? std::max(next_ns_, now - burst_ns) : next_ns_;
    next_ns_ = from + uint64_t(bytes * ns_per_byte);
  }
  on_bytes(now, bytes);
}

void ReactionPoint::set_rate(uint64_t ns, Rule rule, double rate, double target) {
  rate = std::max(rate, min_);
  if (!limited_) next_ns_ = ns;  // a new limiter starts with an empty bucket... of time now
  limited_ = true;
  rate_ = rate;
  last_ = {ns, rule, rate, target};
  ++counts_[size_t(rule)];
  if (log) log->push_back(last_);
}

void ReactionPoint::release(uint64_t ns) {
  limited_ = false;
  rate_ = 0;
  last_ = {ns, Rule::Release, line_, line_};
  ++counts_[size_t(Rule::Release)];
  if (log) log->push_back(last_);
}

std::unique_ptr<ReactionPoint> make(const Config& c, uint32_t qp_index) {
  if (!c.per_qp.empty()) {
    const Algo a = c.per_qp[qp_index % c.per_qp.size()];
    if (a != c.algo) {
      Config one = c;
      one.algo = a;
      one.per_qp.clear();
      return make(one);
    }
  }
  switch (c.algo) {
    case Algo::Dcqcn: return make_dcqcn(c);
    case Algo::Timely: return make_timely(c);
    default: return nullptr;
  }
}

}  // namespace uroce::engine::cc
