#include <rte_cycles.h>

#include <algorithm>
#include <memory>
#include <cstdio>
#include <vector>

#include "bench/perf/context.hpp"
#include "bench/perf/flows.hpp"
#include "bench/perf/loops.hpp"
#include "bench/perf/report.hpp"

namespace uroce::perf {

using namespace uroce::engine;

BwResult run_bw_client(Ctx& c, uint64_t size) {
  const uint64_t iters = c.o.iters;
  for (auto& x : c.q) x.posted = x.completed = 0;
  std::vector<uint64_t> stamps;  // (tsc) at every signaled completion, with messages done so far
  std::vector<uint64_t> counts;
  stamps.reserve(iters * c.o.qps / c.o.cq_mod + 16);
  counts.reserve(stamps.capacity());
  uint64_t done = 0;
  const uint64_t total = iters * c.o.qps;
  Wc wc[32];
  const uint64_t t0 = rte_get_tsc_cycles();
  std::unique_ptr<FlowLog> flows;
  if (!c.o.flow_log.empty()) flows = std::make_unique<FlowLog>(c, t0);
  const uint64_t stagger = uint64_t(c.o.stagger_ms * double(c.hz) / 1000);
  while (done < total) {
    const uint64_t started = stagger ? (rte_get_tsc_cycles() - t0) / stagger + 1 : c.q.size();
    for (size_t qi = 0; qi < c.q.size() && qi < started; ++qi) {
      QpCtx& x = c.q[qi];
      while (x.posted < iters && x.posted - x.completed < c.o.tx_depth) {
        const bool sig = (x.posted + 1) % c.o.cq_mod == 0 || x.posted + 1 == iters;
        post_op(c, x, size, x.posted, sig);
        ++x.posted;
      }
    }
    c.dev->progress();
    int n = c.dev->poll_cq(c.scq, 32, wc);
    if (n > 0) {
      const uint64_t now = rte_get_tsc_cycles();
      for (int i = 0; i < n; ++i) {
        c.check_wc(wc[i]);
        QpCtx& x = *c.by_qpn.at(wc[i].qp_num);
        const uint64_t upto = wc[i].wr_id + 1;
        done += upto - x.completed;
        if (flows) {
          flows->completed(now, size_t(&x - c.q.data()), upto - x.completed, size);
          if (upto == iters) flows->one_done(now);
        }
        x.completed = upto;
      }
      stamps.push_back(now);
      counts.push_back(done);
    }
  }
  const uint64_t t1 = rte_get_tsc_cycles();
  BwResult r;
  if (flows) r.flows = flows->finish(size);
  const double secs = double(t1 - t0) / double(c.hz);
  r.avg = double(total) * double(size) * 8 / secs / 1e9;
  r.mpps = double(total) / secs / 1e6;
  // Peak: the best rate over any window of at least 1/16 of the messages.
  const uint64_t win = std::max<uint64_t>(total / 16, 1);
  size_t j = 0;
  double best = r.avg;
  for (size_t i = 0; i < stamps.size(); ++i) {
    while (j < i && counts[i] - counts[j] >= win * 2) ++j;
    uint64_t msgs = counts[i] - (j < i ? counts[j] : 0);
    uint64_t dt = stamps[i] - (j < i ? stamps[j] : t0);
    if (msgs >= win && dt > 0) best = std::max(best, double(msgs) * double(size) * 8 / (double(dt) / double(c.hz)) / 1e9);
  }
  r.peak = best;
  return r;
}

void run_send_server(Ctx& c, uint64_t size) {
  const uint64_t iters = c.o.iters;
  uint64_t done = 0;
  const uint64_t total = iters * c.o.qps;
  Wc wc[32];
  while (done < total) {
    c.dev->progress();
    int n = c.dev->poll_cq(c.rcq, 32, wc);
    for (int i = 0; i < n; ++i) {
      c.check_wc(wc[i]);
      if (wc[i].byte_len != size) die("received %u bytes, expected %lu", wc[i].byte_len, (unsigned long)size);
      ++done;
      QpCtx& x = *c.by_qpn.at(wc[i].qp_num);
      ++x.recv_done;
      if (x.recv_posted < iters) post_recvs(c, x, size, 1);
    }
  }
}

}  // namespace uroce::perf
