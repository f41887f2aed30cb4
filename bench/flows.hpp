// Flows that share a bottleneck, as cc_bench (virtual time) and uroce-perf --flow-log (a real
// link) report them: from each flow's rate per window and the queue each frame found, the
// goodput after the last flow started, Jain's fairness index, when it reached 0.95 for good,
// the queue's 99th percentile (all and after that) and the drops after it. Pure code.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
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

// A picture of the flows: each flow's rate over time (top) and the queue (bottom; the largest
// value the frames found in each 0.1 ms column), as SVG.
struct FlowPlot {
  std::string title;
  double gbps = 10;        // the bottleneck: the rate axis goes to 1.1 x this
  double window_ms = 1;    // each rate point's window
  double ms = 100;         // the time axis
  uint32_t queue_kb = 512, k_kb = 64;
};

inline bool write_flow_svg(const std::string& path, const FlowPlot& p, const std::vector<std::vector<double>>& rate,
                           const std::vector<std::pair<double, uint32_t>>& queue) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  const double W = 720, H1 = 220, H2 = 140, L = 60, T = 30, G = 50;
  const double ms = std::max(p.ms, 1.0);  // axes of at least 1 ms, 0.1 Gbit/s and 1 KiB
  const double gbps = std::max(p.gbps, 0.1);
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"};
  std::fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
               L + W + 20, T + H1 + G + H2 + 40);
  std::fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  std::fprintf(f, "<text x=\"%.0f\" y=\"18\">%s</text>\n", L, p.title.c_str());
  const double ymax = gbps * 1.1;
  auto x = [&](double t) { return L + W * t / ms; };
  auto y1 = [&](double g) { return T + H1 - H1 * std::min(g, ymax) / ymax; };
  std::fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#888\"/>\n", L, T, W, H1);
  for (double g = 0; g <= gbps; g += gbps / 4)
    std::fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.1f</text>\n", L - 4, y1(g) + 4, g);
  std::fprintf(f, "<text x=\"12\" y=\"%.0f\" transform=\"rotate(-90 12 %.0f)\" text-anchor=\"middle\">Gbit/s per flow</text>\n",
               T + H1 / 2, T + H1 / 2);
  const size_t flows = rate.empty() ? 0 : rate[0].size();
  for (size_t i = 0; i < flows; ++i) {
    std::fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", colors[i % 8]);
    for (size_t w = 0; w < rate.size(); ++w) std::fprintf(f, "%.1f,%.1f ", x(double(w + 1) * p.window_ms), y1(rate[w][i]));
    std::fprintf(f, "\"/>\n<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">flow %zu</text>\n", L + W - 60, T + 16 + 14 * double(i),
                 colors[i % 8], i);
  }
  const double T2 = T + H1 + G;
  const double qmax = std::max(double(p.queue_kb), 1.0);  // no queue configured: an empty panel, not a loop
  auto y2 = [&](double kb) { return T2 + H2 - H2 * std::min(kb, qmax) / qmax; };
  std::fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#888\"/>\n", L, T2, W, H2);
  std::fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#999\" stroke-dasharray=\"4 3\"/><text x=\"%.0f\" y=\"%.1f\">K</text>\n",
               L, L + W, y2(p.k_kb), y2(p.k_kb), L + W + 4, y2(p.k_kb) + 4);
  for (double kb = 0; kb <= qmax; kb += qmax / 4)
    std::fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n", L - 4, y2(kb) + 4, kb);
  std::fprintf(f, "<text x=\"12\" y=\"%.0f\" transform=\"rotate(-90 12 %.0f)\" text-anchor=\"middle\">queue KiB</text>\n",
               T2 + H2 / 2, T2 + H2 / 2);
  std::vector<double> col(size_t(ms * 10) + 1, -1);
  for (const auto& [t, q] : queue) {
    const size_t c = std::min(col.size() - 1, size_t(t * 10));
    col[c] = std::max(col[c], double(q) / 1024);
  }
  std::fprintf(f, "<polyline fill=\"none\" stroke=\"#333\" stroke-width=\"1\" points=\"");
  for (size_t c = 0; c < col.size(); ++c)
    if (col[c] >= 0) std::fprintf(f, "%.1f,%.1f ", x(double(c) / 10), y2(col[c]));
  std::fprintf(f, "\"/>\n");
  for (double t = 0; t <= ms + 1e-9; t += ms / 10)
    std::fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%.0f</text>\n", x(t), T2 + H2 + 16, t);
  std::fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">time (ms)</text>\n</svg>\n", L + W / 2, T2 + H2 + 34);
  std::fclose(f);
  return true;
}

}  // namespace uroce::bench
