// uroce-perf --flow-log FILE: each QP's rate per millisecond while every QP is running, with the
// link's congestion point (keys bottleneck_*) as the frames found it, summed up as cc_bench sums
// up its flows (bench/flows.hpp): goodput, Jain's fairness index and when it reached 0.95 for
// good, the queue's 99th percentile, drops. The file: one row per window (--flow-ms; each QP's
// Gbit/s, the largest queue in KiB); the summary: one line after the result row ("flows: ...");
// --flow-svg FILE: each QP's rate and the queue over time, as cc_bench draws them.
// Windows of 10 ms by default: a 64 KiB message is 0.5 Gbit/s of a 1 ms window, too coarse.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bench/perf/context.hpp"

namespace uroce::perf {

class FlowLog {
 public:
  // From now (t0 in TSC cycles): asks the link to record its bottleneck's queue and drops.
  FlowLog(Ctx& c, uint64_t t0);
  // QP index `qp` completed `msgs` messages of `size` bytes at `now` (cycles).
  void completed(uint64_t now, size_t qp, uint64_t msgs, uint64_t size);
  // A QP posted its last message's completion at `now`: the span where all run ends here.
  void one_done(uint64_t now);
  // Writes the file (--flow-log; --flow-svg: the picture too) and returns the summary line for
  // messages of `size` bytes; the windows are --flow-ms long, the last QP started at
  // --stagger-ms x (QPs - 1).
  std::string finish(uint64_t size);

 private:
  Ctx& c_;
  uint64_t t0_, t0_ns_, win_;          // win_: one millisecond in cycles
  uint64_t end_ = UINT64_MAX;          // cycles: the first QP done
  std::vector<std::vector<uint64_t>> bytes_;  // [window][qp]
};

}  // namespace uroce::perf
