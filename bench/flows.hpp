// Flows that share a bottleneck, as cc_bench (virtual time) and uroce-perf --flow-log (a real
// link) report them: from each flow's rate per window and the queue each frame found, the
// goodput after the last flow started, Jain's fairness index, when it reached 0.95 for good,
// the queue's 99th percentile (all and after that) and the drops after it. Pure code.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace uroce::bench {

inline double jain(const std::vector<double>& x) {
  double s = 0, s2 = 0;
  for (double v : x) s += v, s2 += v * v;
  return s2 > 0 ? s * s / (double(x.size()) * s2) : 0;
}

inline uint32_t p99(std::vector<uint32_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(double(v.size()) * 0.99))];
}

struct FlowReport {
  double goodput_gbps = 0;   // the flows' rates summed, averaged over the windows after the last start
  double jain_end = 0;       // in the last window
  double converged_ms = -1;  // after the last flow's start: from here on Jain >= 0.95 in every window; -1: never
  uint32_t q99_all = 0, q99_conv = 0;
  uint64_t drops_conv = 0;   // drops after convergence
};

// rate[w][flow]: Gbit/s in window w (window_ms long, from 0); last_start_ms: the last flow's
// start; queue: (ms, bytes waiting) as each frame found it; drops_at[w]: the drops counted by
// the end of window w, drops_total at the end.
inline FlowReport summarize(const std::vector<std::vector<double>>& rate, double window_ms, double last_start_ms,
                            const std::vector<std::pair<double, uint32_t>>& queue, const std::vector<uint64_t>& drops_at,
                            uint64_t drops_total) {
  FlowReport r;
  double bits = 0;
  size_t windows = 0;
  for (size_t w = 0; w < rate.size(); ++w) {
    if (double(w + 1) * window_ms <= last_start_ms + window_ms) continue;
    for (double v : rate[w]) bits += v;
    ++windows;
  }
  r.goodput_gbps = windows ? bits / double(windows) : 0;
  const size_t first_all = size_t(last_start_ms / window_ms) + 1;
  size_t conv = rate.size();
  for (size_t w = rate.size(); w-- > first_all;) {
    if (jain(rate[w]) < 0.95) break;
    conv = w;
  }
  if (conv < rate.size()) r.converged_ms = double(conv) * window_ms - last_start_ms;
  if (!rate.empty()) r.jain_end = jain(rate.back());
  const double conv_at_ms = r.converged_ms >= 0 ? last_start_ms + r.converged_ms : 1e18;
  std::vector<uint32_t> all, after;
  for (const auto& [ms, q] : queue) {
    all.push_back(q);
    if (ms >= conv_at_ms) after.push_back(q);
  }
  r.q99_all = p99(all);
  r.q99_conv = p99(after);
  if (conv < rate.size()) r.drops_conv = drops_total - (conv && conv - 1 < drops_at.size() ? drops_at[conv - 1] : 0);
  return r;
}

}  // namespace uroce::bench
