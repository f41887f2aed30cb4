// A congestion point for experiments: one egress queue served at a fixed rate, as a switch port
// that is slower than what arrives at it. Frames wait their turn (first in, first out), an
// ECN-capable frame that arrives to a queue longer than the marking threshold K is marked CE
// (a step at K, as DCTCP asks of a switch, or RED's probability rising from K to a maximum), and
// a frame that does not fit is dropped (tail drop). Not-ECT frames are never marked, only
// dropped when the queue is full.
//
// Pure code, no DPDK and no buffers, like engine/fault.hpp: the test FakeLink and the port's
// fault stage ask admit() for each frame, then hold it until its departure time, mark it
// (proto::mark_ce) or drop it with their own buffers. Same seed, same frames: same verdicts.
#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>

namespace uroce::engine {

struct BottleneckConfig {
  uint64_t rate_bps = 0;         // the queue's service rate in bit/s (frames with their overhead)
  uint64_t pps = 0;              // or in frames per second (when rate_bps is 0); both 0: no bottleneck
  uint32_t queue_bytes = 1 << 20;  // what the queue holds; a frame that would not fit is dropped
  uint32_t mark_bytes = 0;       // K: 0, never mark
  uint32_t mark_max_bytes = 0;   // RED: marking probability 0 at K rising to mark_pmax here; 0: a step at K
  double mark_pmax = 1.0;
  uint32_t overhead = 24;        // bytes each frame takes on the wire besides itself: preamble, FCS, gap

  bool on() const { return rate_bps != 0 || pps != 0; }
};

struct BottleneckVerdict {
  bool drop = false;
  bool mark = false;           // mark it CE (the frame is ECN-capable)
  uint64_t depart_ns = 0;      // when its last bit has left the queue
  uint32_t queue_bytes = 0;    // the queue it found (bytes waiting, before it)
};

struct BottleneckCounters {
  uint64_t frames = 0, bytes = 0;  // admitted
  uint64_t marked = 0, dropped = 0;
  uint32_t max_queue_bytes = 0;
};

class Bottleneck {
 public:
  explicit Bottleneck(uint64_t seed = 1) : rng_(seed) {}

  // The frame of `len` bytes arriving at `now_ns`; `ect`: its ECN field is ECT(0) or ECT(1).
  BottleneckVerdict admit(const BottleneckConfig& c, uint64_t now_ns, uint32_t len, bool ect) {
    BottleneckVerdict v;
    v.queue_bytes = queue_bytes(now_ns);
    if (uint64_t(v.queue_bytes) + len > c.queue_bytes) {
      v.drop = true;
      ++ctr.dropped;
      return v;
    }
    if (ect && c.mark_bytes && v.queue_bytes > c.mark_bytes) {
      if (c.mark_max_bytes <= c.mark_bytes || v.queue_bytes >= c.mark_max_bytes) {
        v.mark = c.mark_max_bytes <= c.mark_bytes || chance() < c.mark_pmax;
      } else {
        const double p = c.mark_pmax * double(v.queue_bytes - c.mark_bytes) / double(c.mark_max_bytes - c.mark_bytes);
        v.mark = chance() < p;
      }
    }
    const uint64_t now_ps = now_ns * 1000;
    const uint64_t start = std::max(now_ps, busy_until_ps_);
    const uint64_t service_ps = c.rate_bps ? (uint64_t(len) + c.overhead) * 8 * 1'000'000'000'000ull / c.rate_bps
                                           : 1'000'000'000'000ull / c.pps;
    busy_until_ps_ = start + service_ps;
    v.depart_ns = (busy_until_ps_ + 999) / 1000;
    waiting_.push_back({v.depart_ns, len});
    queued_ += len;
    ++ctr.frames;
    ctr.bytes += len;
    if (v.mark) ++ctr.marked;
    ctr.max_queue_bytes = std::max(ctr.max_queue_bytes, v.queue_bytes + len);
    return v;
  }

  // Bytes waiting at `now_ns` (frames that have not yet left).
  uint32_t queue_bytes(uint64_t now_ns) {
    while (!waiting_.empty() && waiting_.front().depart_ns <= now_ns) {
      queued_ -= waiting_.front().len;
      waiting_.pop_front();
    }
    return uint32_t(std::min<uint64_t>(queued_, UINT32_MAX));
  }

  BottleneckCounters ctr;

 private:
  double chance() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  struct Waiting {
    uint64_t depart_ns;
    uint32_t len;
  };
  std::deque<Waiting> waiting_;
  uint64_t queued_ = 0;
  uint64_t busy_until_ps_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace uroce::engine
