#include "tests/support/fake_link.hpp"

#include <algorithm>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "proto/ecn.hpp"

namespace uroce::engine {

namespace {
std::unique_ptr<uint8_t[], FakeWire::Unmap> map_pool(size_t len) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return {static_cast<uint8_t*>(p), FakeWire::Unmap{len}};
}
}  // namespace

void FakeWire::Unmap::operator()(uint8_t* p) const { munmap(p, len); }

FakeWire::FakeWire(uint32_t frames, uint32_t frame_cap, uint64_t seed)
    : slots_(frames), cap_(frame_cap), pool_(map_pool(size_t(frames) * frame_cap)), lens_(frames) {
  free_.reserve(frames);
  for (uint32_t i = frames; i-- > 0;) free_.push_back(i);
  for (FakeLink* l : {&a_, &b_}) {
    l->wire_ = this;
    l->frame_cap_ = frame_cap;
    l->rx_.clear();
  }
  a_.peer_ = &b_;
  b_.peer_ = &a_;
  a_.dice_.seed(seed * 2 + 1);
  b_.dice_.seed(seed * 2 + 2);
}

uint32_t FakeWire::take_slot() {
  if (free_.empty()) return UINT32_MAX;
  uint32_t s = free_.back();
  free_.pop_back();
  return s;
}

uint64_t FakeWire::next_due() const {
  uint64_t t = UINT64_MAX;
  for (const FakeLink* l : {&a_, &b_}) {
    for (const auto& f : l->rx_) t = std::min(t, f.due);
    for (const auto& f : l->held_) t = std::min(t, f.due);
  }
  return t;
}

bool FakeLink::alloc(PacketBuf& b, uint32_t len) {
  if (refuse_allocs) return --refuse_allocs, false;
  if (len > frame_cap_) return false;
  uint32_t s = wire_->take_slot();
  if (s == UINT32_MAX) return false;
  b.data = wire_->slot_data(s);
  b.cap = frame_cap_;
  b.len = 0;
  b.handle = reinterpret_cast<void*>(uintptr_t(s));
  return true;
}

void FakeLink::release(PacketBuf& b) {
  wire_->give_slot(uint32_t(reinterpret_cast<uintptr_t>(b.handle)));
  b = PacketBuf{};
}

void FakeLink::deliver(uint32_t slot, uint64_t due) {
  // Queued at the peer. Arrival order is the order of `due`; equal times keep send order.
  auto& q = peer_->rx_;
  if (q.empty() || q.back().due <= due) {
    q.push_back({due, slot});
  } else {
    auto it = std::upper_bound(q.begin(), q.end(), due, [](uint64_t d, const InFlight& f) { return d < f.due; });
    q.insert(it, {due, slot});
  }
  ++counters.delivered;
}

size_t FakeLink::send(PacketBuf* bufs, size_t n) {
  const uint64_t now = wire_->clock_.now_ns();
  for (size_t i = 0; i < n; ++i) {
    PacketBuf& b = bufs[i];
    const uint32_t slot = uint32_t(reinterpret_cast<uintptr_t>(b.handle));
    wire_->lens_[slot] = b.len;
    ++counters.sent;
    uint64_t due = now + wire_->latency_ns;
    if (wire_->rate_bps) {
      // Serialised after the frames before it (lost ones used the wire too), then propagated.
      // Kept in picoseconds so that rounding does not add up over many frames.
      const uint64_t start = std::max(now * 1000, busy_until_ps_);
      busy_until_ps_ = start + (uint64_t(b.len) + FakeWire::kWireOverhead) * 8 * 1'000'000'000'000ull / wire_->rate_bps;
      due = (busy_until_ps_ + 999) / 1000 + wire_->latency_ns;
    }
    if (tap) tap(b.data, b.len);
    if (filter && !filter(b.data, b.len)) {
      ++counters.dropped;
      wire_->give_slot(slot);
      continue;
    }
    if (bottleneck.on()) {
      const std::span<uint8_t> f(b.data, b.len);
      const int ecn = proto::ecn_of(f);
      // It reaches the congestion point once the sender's own link (the wire's rate) has sent it.
      const uint64_t at = wire_->rate_bps ? due - wire_->latency_ns : now;
      const BottleneckVerdict v = congestion.admit(bottleneck, at, b.len, ecn == 1 || ecn == 2);
      if (v.drop) {
        ++counters.dropped;
        wire_->give_slot(slot);
        continue;
      }
      if (v.mark) proto::mark_ce(f);
      due = v.depart_ns + wire_->latency_ns;
    }
    // The decisions are engine/fault.hpp's (the same model as the DPDK port's fault stage).
    const FaultDecision d = dice_.decide(faults, uint64_t(b.len) * 8, held_.empty());
    if (d.drop) {
      ++counters.dropped;
      wire_->give_slot(slot);
      continue;
    }
    if (d.corrupt) {
      b.data[d.corrupt_bit / 8] ^= uint8_t(1u << (d.corrupt_bit % 8));
      ++counters.corrupted;
    }
    if (d.delay) {
      due += d.delay_ns;
      ++counters.delayed;
    }
    if (d.duplicate) {
      uint32_t copy = wire_->take_slot();
      if (copy != UINT32_MAX) {
        std::memcpy(wire_->slot_data(copy), b.data, b.len);
        wire_->lens_[copy] = b.len;
        ++counters.duplicated;
        deliver(copy, due + 1);
      }
    }
    if (d.reorder) {
      held_.push_back({due, slot});
      held_countdown_ = d.reorder_after;
      ++counters.reordered;
      continue;
    }
    deliver(slot, due);
    if (!held_.empty() && --held_countdown_ == 0) {
      for (auto& h : held_) deliver(h.slot, std::max(h.due, due) + 1);
      held_.clear();
    }
  }
  // Anything still held back goes out after a short while even if nothing follows it.
  if (!held_.empty() && held_countdown_ > 0 && n == 0) {
    for (auto& h : held_) deliver(h.slot, h.due);
    held_.clear();
  }
  return n;
}

size_t FakeLink::recv(PacketBuf* bufs, size_t max) {
  // A held-back frame must not wait forever when its peer goes quiet.
  if (!peer_->held_.empty() && peer_->held_.front().due + 20'000 <= wire_->clock_.now_ns()) {
    for (auto& h : peer_->held_) peer_->deliver(h.slot, wire_->clock_.now_ns());
    peer_->held_.clear();
  }
  const uint64_t now = wire_->clock_.now_ns();
  size_t n = 0;
  while (n < max && !rx_.empty() && rx_.front().due <= now) {
    uint32_t s = rx_.front().slot;
    rx_.pop_front();
    bufs[n].data = wire_->slot_data(s);
    bufs[n].len = wire_->lens_[s];
    bufs[n].cap = frame_cap_;
    bufs[n].handle = reinterpret_cast<void*>(uintptr_t(s));
    ++n;
  }
  return n;
}

void FakeLink::inject(const uint8_t* data, uint32_t len) {
  if (len > frame_cap_) return;  // too long for a slot: checked before one is taken
  uint32_t s = wire_->take_slot();
  if (s == UINT32_MAX) return;
  std::memcpy(wire_->slot_data(s), data, len);
  wire_->lens_[s] = len;
  rx_.push_back({0, s});
}

}  // namespace uroce::engine
