// FaultStage: one direction (receive or transmit) of a DpdkLink's fault injection, for watching
// go-back-N, RNR and timeouts on a real link, and for loss benchmarks (config keys fault_*,
// or UROCE_FAULT_* through the shim; docs/observability.md).
//
// For each frame it asks the one fault model (engine/fault.hpp, also the test FakeLink's) what
// to do, corrupts the frame in place when told to, counts, and keeps the frames to be held
// back (delayed, reordered) in a bounded list until they are due. The link does the rest with
// its own buffers (frees the dropped, copies the duplicated, sends or receives what is
// released). No DPDK here: frames are the link's handles (void*) and their bytes.
//
// Which frames: RoCEv2 (UDP port 4791, by proto::locate) unless `all`. Where a RoCE frame is
// corrupted: one bit after the BTH and its extension headers, up to the end of the IP packet
// (payload, pad or ICRC): the frame still reaches the engine's QP and the engine counts it as
// an ICRC error, as a bit error on a real wire would be. Other frames: one bit after the
// Ethernet header.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/fault.hpp"
#include "port/param.hpp"

namespace uroce::port {

// What one direction's stage did.
struct FaultCounts {
  uint64_t dropped = 0, duplicated = 0, reordered = 0, corrupted = 0, delayed = 0;
  uint64_t hold_full = 0;  // frames to be delayed or reordered that went on at once: the hold was full
};

class FaultStage {
 public:
  void configure(const engine::FaultConfig& f, uint64_t seed, bool all) {
    cfg_ = f;
    dice_.seed(seed);
    all_ = all;
    held_.clear();
    held_.reserve(param::kFaultHold);
  }
  bool on() const { return cfg_.any(); }
  bool holding() const { return !held_.empty(); }

  // Decides for one frame (nothing for a frame it does not apply to) and flips the bit when
  // the decision is to corrupt. Counts drops and corruptions; duplicates are counted by
  // count_duplicate() once the link has made the copy, delays and reorders by hold(), which
  // may refuse them.
  engine::FaultDecision decide(uint8_t* frame, uint32_t len);

  // Holds back a frame the decision delays or reorders, until now_ns + delay or, reordered,
  // until `after` later frames have passed (or kFaultReorderHoldNs). False when the hold is
  // full: the frame goes on now (counted in hold_full).
  bool hold(void* frame, const engine::FaultDecision& d, uint64_t now_ns);
  void count_duplicate() { ++counts_.duplicated; }
  // A frame went on: the reordered ones waiting for it count down.
  void passed() {
    for (Held& h : held_)
      if (h.after) --h.after, h.ready |= h.after == 0;
  }
  // Takes the held frames that are due, oldest first, up to `max`.
  size_t release(uint64_t now_ns, void** out, size_t max);
  // Takes every held frame (at close).
  size_t release_all(void** out, size_t max) { return release(UINT64_MAX, out, max); }

  const FaultCounts& counts() const { return counts_; }

 private:
  struct Held {
    void* frame;
    uint64_t due_ns;
    uint32_t after;  // reordered: later frames still to pass; 0 for a delay
    bool ready;      // its count reached 0
  };
  engine::FaultConfig cfg_;
  engine::FaultDice dice_;
  bool all_ = false;
  std::vector<Held> held_;  // capacity kFaultHold, reserved once: oldest first
  FaultCounts counts_;
};

}  // namespace uroce::port
