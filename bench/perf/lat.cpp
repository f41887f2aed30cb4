#include <rte_cycles.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/perf/context.hpp"
#include "bench/perf/loops.hpp"
#include "bench/perf/report.hpp"

namespace uroce::perf {

using namespace uroce::engine;

LatResult lat_stats(std::vector<uint64_t>& d, double hz, double div) {
  std::sort(d.begin(), d.end());
  auto us = [&](uint64_t cyc) { return double(cyc) / hz * 1e6 / div; };
  LatResult r{};
  const size_t n = d.size();
  r.tmin = us(d.front());
  r.tmax = us(d.back());
  r.typical = us(d[n / 2]);
  double sum = 0;
  for (auto v : d) sum += us(v);
  r.avg = sum / double(n);
  double var = 0;
  for (auto v : d) var += (us(v) - r.avg) * (us(v) - r.avg);
  r.stdev = std::sqrt(var / double(n));
  r.p99 = us(d[std::min(n - 1, size_t(double(n) * 0.99))]);
  r.p999 = us(d[std::min(n - 1, size_t(double(n) * 0.999))]);
  return r;
}

namespace {

void wait_send_cqe(Ctx& c) {
  Wc wc;
  for (;;) {
    c.dev->progress();
    if (c.dev->poll_cq(c.scq, 1, &wc) == 1) {
      c.check_wc(wc);
      return;
    }
  }
}

}  // namespace

std::vector<uint64_t> run_pingpong(Ctx& c, uint64_t size) {
  QpCtx& x = c.q[0];
  const uint64_t iters = c.o.iters;
  std::vector<uint64_t> rtt, ack_t;  // round trips; their parts until the send completion
  rtt.reserve(iters);
  ack_t.reserve(iters);
  volatile uint8_t* flag = x.rbuf + size - 1;  // last byte of the incoming message
  Wc wc;
  auto wait_incoming = [&](uint64_t i) {
    if (c.o.test == Test::Write) {
      const uint8_t want = uint8_t(i % 255 + 1);
      while (*flag != want) c.dev->progress();
    } else {
      for (;;) {
        c.dev->progress();
        if (c.dev->poll_cq(c.rcq, 1, &wc) == 1) {
          c.check_wc(wc);
          if (wc.byte_len != size) die("received %u bytes, expected %lu", wc.byte_len, (unsigned long)size);
          if (i + 1 < iters) post_recvs(c, x, size, 1);  // none left over for the next size
          return;
        }
      }
    }
  };
  auto send_one = [&](uint64_t i) {
    x.sbuf[size - 1] = uint8_t(i % 255 + 1);
    post_op(c, x, size, i, true);
    wait_send_cqe(c);
  };
  for (uint64_t i = 0; i < iters; ++i) {
    if (c.server) {
      wait_incoming(i);
      send_one(i);
    } else {
      const uint64_t t0 = rte_get_tsc_cycles();
      send_one(i);
      ack_t.push_back(rte_get_tsc_cycles() - t0);
      wait_incoming(i);
      rtt.push_back(rte_get_tsc_cycles() - t0);
    }
  }
  // UROCE_PERF_LAT_DUMP=FILE: each round trip in order, for finding where a tail comes from
  // (docs/performance.md, "Tail latency"): its time and the part of it until the send completion
  // (the peer's ACK), in ns.
  if (const char* path = std::getenv("UROCE_PERF_LAT_DUMP"); path && !c.server) {
    if (FILE* o = std::fopen(path, "w")) {
      const double ns = 1e9 / double(rte_get_tsc_hz());
      for (size_t k = 0; k < rtt.size(); ++k)
        std::fprintf(o, "%.0f %.0f\n", double(rtt[k]) * ns, double(ack_t[k]) * ns);
      std::fclose(o);
    }
  }
  return rtt;
}

std::vector<uint64_t> run_lat_oneside(Ctx& c, uint64_t size) {
  QpCtx& x = c.q[0];
  std::vector<uint64_t> d;
  d.reserve(c.o.iters);
  Wc wc;
  for (uint64_t i = 0; i < c.o.iters; ++i) {
    const uint64_t t0 = rte_get_tsc_cycles();
    post_op(c, x, size, i, true);
    for (;;) {
      c.dev->progress();
      if (c.dev->poll_cq(c.scq, 1, &wc) == 1) break;
    }
    d.push_back(rte_get_tsc_cycles() - t0);
    c.check_wc(wc);
  }
  return d;
}

}  // namespace uroce::perf
