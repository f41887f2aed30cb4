#include "bench/perf/flows.hpp"

#include <cstdio>

#include "bench/flows.hpp"
#include "port/clock.hpp"
#include "port/dpdk_link.hpp"

namespace uroce::perf {

FlowLog::FlowLog(Ctx& c, uint64_t t0) : c_(c), t0_(t0), t0_ns_(port::TscClock().now_ns()), win_(c.hz / 1000) {
  if (auto* l = dynamic_cast<port::DpdkLink*>(c.link)) l->log_bottleneck(true);
}

void FlowLog::completed(uint64_t now, size_t qp, uint64_t msgs, uint64_t size) {
  const size_t w = size_t((now - t0_) / win_);
  if (w >= bytes_.size()) bytes_.resize(w + 1, std::vector<uint64_t>(c_.q.size(), 0));
  bytes_[w][qp] += msgs * size;
}

void FlowLog::one_done(uint64_t now) { end_ = std::min(end_, now); }

std::string FlowLog::finish(uint64_t size) {
  const std::string& path = c_.o.flow_log;
  const double last_start_ms = c_.o.stagger_ms * double(c_.q.size() - 1);
  const uint32_t window_ms = c_.o.flow_ms;
  // Whole windows while every QP ran, of window_ms milliseconds each.
  const size_t ms_n = std::min(bytes_.size(), end_ == UINT64_MAX ? bytes_.size() : size_t((end_ - t0_) / win_));
  const size_t per = std::max<uint32_t>(window_ms, 1), n = ms_n / per;
  std::vector<std::vector<double>> rate(n, std::vector<double>(c_.q.size(), 0));
  for (size_t w = 0; w < n; ++w)
    for (size_t k = 0; k < per; ++k)
      for (size_t i = 0; i < c_.q.size(); ++i) rate[w][i] += double(bytes_[w * per + k][i]) * 8 / 1e6 / double(per);
  std::vector<std::pair<double, uint32_t>> queue;
  std::vector<uint64_t> drops_at(n, 0);
  uint64_t drops = 0;
  std::vector<uint32_t> qmax(n, 0);
  if (auto* l = dynamic_cast<port::DpdkLink*>(c_.link)) {
    const auto& log = l->bottleneck_log();
    const double end_ms = double(n * per);
    for (const auto& [t, q] : log.queue) {
      if (t < t0_ns_) continue;
      const double ms = double(t - t0_ns_) / 1e6;
      if (ms >= end_ms) break;
      queue.emplace_back(ms, q);
      qmax[size_t(ms) / per] = std::max(qmax[size_t(ms) / per], q);
    }
    for (uint64_t t : log.drops) {
      if (t < t0_ns_) continue;
      const double ms = double(t - t0_ns_) / 1e6;
      if (ms >= end_ms) break;
      ++drops;
      for (size_t w = size_t(ms) / per; w < n; ++w) ++drops_at[w];
    }
  }
  const bench::FlowReport r = bench::summarize(rate, double(per), last_start_ms, queue, drops_at, drops);
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "ms");
    for (size_t i = 0; i < c_.q.size(); ++i) std::fprintf(f, ",qp%zu_gbps", i);
    std::fprintf(f, ",queue_max_kib\n");
    for (size_t w = 0; w < n; ++w) {
      std::fprintf(f, "%zu", w * per);
      for (double v : rate[w]) std::fprintf(f, ",%.3f", v);
      std::fprintf(f, ",%.1f\n", double(qmax[w]) / 1024);
    }
    std::fclose(f);
  } else {
    std::fprintf(stderr, "uroce-perf: cannot write %s\n", path.c_str());
  }
  if (!c_.o.flow_svg.empty()) {
    const engine::BottleneckConfig& b = c_.cfg.bottleneck;
    char title[256];
    std::snprintf(title, sizeof title, "uroce-perf: %zu QPs of %llu-byte WRITEs, %.1f Gbit/s bottleneck, K %u KiB%s, queue %u KiB, cc=%s",
                  c_.q.size(), (unsigned long long)size, double(b.rate_bps) / 1e9, b.mark_bytes / 1024,
                  b.mark_max_bytes > b.mark_bytes ? " (RED)" : "", b.queue_bytes / 1024,
                  std::string(engine::cc::algo_name(c_.cfg.cc.algo)).c_str());
    bench::FlowPlot p{title, b.rate_bps ? double(b.rate_bps) / 1e9 : 10, double(per), double(n * per),
                      b.queue_bytes / 1024, b.mark_bytes / 1024};
    if (!bench::write_flow_svg(c_.o.flow_svg, p, rate, queue))
      std::fprintf(stderr, "uroce-perf: cannot write %s\n", c_.o.flow_svg.c_str());
  }
  char conv[32] = "never", q99c[16] = "-", dc[24] = "-";
  if (r.converged_ms >= 0) {
    std::snprintf(conv, sizeof conv, "%.0f ms", r.converged_ms);
    std::snprintf(q99c, sizeof q99c, "%u", r.q99_conv / 1024);
    std::snprintf(dc, sizeof dc, "%llu", (unsigned long long)r.drops_conv);
  }
  char line[320];
  std::snprintf(line, sizeof line,
                "flows: %zu QPs over %zu ms (windows of %zu ms), goodput %.2f Gbit/s, Jain (last window) %.3f, "
                "Jain >= 0.95 after the last start: %s, queue p99 KiB %u / %s (all / converged), drops %llu / %s "
                "(all / converged)",
                c_.q.size(), n * per, per, r.goodput_gbps, r.jain_end, conv, r.q99_all / 1024, q99c,
                (unsigned long long)drops, dc);
  return line;
}

}  // namespace uroce::perf
