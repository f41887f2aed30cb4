// FakeLink: two engines joined in one process, under a virtual clock. Frames sent by one end
// are delivered to the other after `latency_ns` of virtual time, through a fault stage that
// can drop, duplicate, reorder, corrupt and delay them (seeded, reproducible), or apply
// scripted faults ("drop the 3rd frame with opcode X"). No allocation per frame: buffers come
// from a fixed pool shared by both directions.
//
// Optionally a link-rate model (FakeWire::rate_bps): each direction serialises its frames one
// after another at that rate (plus the Ethernet preamble, FCS and inter-frame gap), then
// latency_ns of propagation. Off (0) by default: frames take latency_ns only. Benchmarks use it
// so that their figures depend on virtual time, not on the machine (bench/loss_bench.cpp).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "engine/bottleneck.hpp"
#include "engine/fault.hpp"  // FaultConfig and the decisions, shared with the DPDK port
#include "engine/link.hpp"

namespace uroce::engine {

class VirtualClock : public Clock {
 public:
  uint64_t now_ns() const override { return now_; }
  void advance(uint64_t ns) { now_ += ns; }
  void set(uint64_t ns) { now_ = ns; }

 private:
  uint64_t now_ = 1'000'000;
};

// What the fault stage did, per direction.
struct FaultCounters {
  uint64_t sent = 0, delivered = 0, dropped = 0, duplicated = 0, reordered = 0, corrupted = 0, delayed = 0;
};

class FakeWire;

class FakeLink : public Link {
 public:
  bool alloc(PacketBuf& b, uint32_t len) override;
  // The next this many alloc()s find no buffer (a DPDK link's back-pressure: its transmit
  // backlog full).
  uint32_t refuse_allocs = 0;
  size_t send(PacketBuf* bufs, size_t n) override;
  size_t recv(PacketBuf* bufs, size_t max) override;
  void release(PacketBuf& b) override;
  uint32_t max_frame() const override { return frame_cap_; }
  // Multicast memberships the device asked for (join_group), in order; `group_error` is what a
  // join returns (a kernel that refuses).
  std::vector<std::pair<std::array<uint8_t, 16>, bool>> group_calls;
  int group_error = 0;
  int join_group(const std::array<uint8_t, 16>& g, bool join) override {
    group_calls.emplace_back(g, join);
    return join ? group_error : 0;
  }

  // With keep_notes, the engine's notes for a capture (Link::note) are kept here, in order.
  bool keep_notes = false;
  std::vector<std::string> notes;
  bool wants_notes() const override { return keep_notes; }
  void note(std::string_view text) override { notes.emplace_back(text); }

  // Every frame this end sends is also handed to `tap` (for protocol tests that inspect what
  // an engine emits). Return false from a filter to drop the frame (scripted faults).
  std::function<void(const uint8_t*, uint32_t)> tap;
  std::function<bool(const uint8_t*, uint32_t)> filter;
  // A congestion point on this direction (engine/bottleneck.hpp), after the sender's own link
  // (the wire's rate, if any): frames queue at its rate, ECN-capable ones are marked CE above
  // its threshold, and what does not fit is dropped (counted in both `congestion.ctr` and
  // counters.dropped).
  BottleneckConfig bottleneck;
  Bottleneck congestion;
  FaultConfig faults;
  FaultCounters counters;

  // Injects a frame as if the peer had sent it (bypasses faults).
  void inject(const uint8_t* data, uint32_t len);
  size_t pending_rx() const { return rx_.size(); }

 private:
  friend class FakeWire;
  struct InFlight {
    uint64_t due;
    uint32_t slot;
  };
  FakeWire* wire_ = nullptr;
  FakeLink* peer_ = nullptr;
  uint64_t busy_until_ps_ = 0;     // rate model: this direction's wire is busy until then (ps)
  uint32_t frame_cap_ = 0;
  std::deque<InFlight> rx_;        // frames on their way to this end, in arrival order
  std::vector<InFlight> held_;     // reordered frames waiting behind later ones
  uint32_t held_countdown_ = 0;
  FaultDice dice_;
  void deliver(uint32_t slot, uint64_t due);
};

// Owns both ends, the clock and the buffer pool.
class FakeWire {
 public:
  explicit FakeWire(uint32_t frames = 8192, uint32_t frame_cap = 9216, uint64_t seed = 1);
  FakeLink& a() { return a_; }
  FakeLink& b() { return b_; }
  VirtualClock& clock() { return clock_; }
  uint64_t latency_ns = 1000;      // propagation delay of every frame, per direction
  // Link rate in bit/s per direction (0: infinite). A frame of L bytes occupies the wire for
  // (L + kWireOverhead) * 8 / rate_bps: it arrives that long after the wire was free, plus
  // latency_ns. Frames queue behind each other without limit (no tail drop).
  uint64_t rate_bps = 0;
  static constexpr uint32_t kWireOverhead = 24;  // preamble 8, FCS 4, inter-frame gap 12
  uint32_t free_slots() const { return uint32_t(free_.size()); }
  uint32_t total_slots() const { return slots_; }
  // Virtual time of the next frame due anywhere, or UINT64_MAX.
  uint64_t next_due() const;

  struct Unmap {  // releases the frames' memory (below)
    size_t len;
    void operator()(uint8_t* p) const;
  };

 private:
  friend class FakeLink;
  uint8_t* slot_data(uint32_t s) { return pool_.get() + size_t(s) * cap_; }
  uint32_t take_slot();
  void give_slot(uint32_t s) { free_.push_back(s); }
  uint32_t slots_, cap_;
  // The frames' memory, mapped (not from malloc): its pages are touched only when used, also
  // when a test runs with MALLOC_PERTURB_ (as meson runs every test), which would fill a
  // malloc'ed pool of 75 MB on every pair it builds (ops_test: 0.8 s alone, 112 s so).
  std::unique_ptr<uint8_t[], Unmap> pool_;
  std::vector<uint32_t> lens_;
  std::vector<uint32_t> free_;
  VirtualClock clock_;
  FakeLink a_, b_;
};

}  // namespace uroce::engine
