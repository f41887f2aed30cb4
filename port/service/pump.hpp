// The data path of a shared device (the uroce service, docs/service.md), in one place for the
// daemon and for an attached process that drives the port itself.
//
// Every process on the device has four rings in the daemon's memory (SlotRings below).
// Whoever holds the device's port (PumpShared::holder) moves the frames: it receives from the
// port and hands each frame to its owner's rx ring, sends what the processes' tx rings hold (a
// frame to the device's own MAC goes to its owner instead of the wire), frees what their free
// rings hold and refills their fill rings. The daemon is the holder unless a process drives:
//   - Driving (Welcome::drive, only for ports a DPDK secondary can poll: memif): a process that
//     polls takes the port when it is free, runs one step, and gives it back. While processes
//     drive, the daemon sleeps instead of polling, so a device with one busy process costs one
//     busy thread, as a link of the process's own does. Frames the driver cannot place by their
//     bytes alone (ARP, ND, ICMP, a REQ for a listening service ID, frames for another MAC) go
//     to the daemon's ring, and the daemon sorts them as if it had received them.
//   - A process that dies holding the port: the daemon takes the port back when it sees the
//     process's socket close, and returns the buffers left in that process's mbuf cache.
// Whose hands a buffer is in: every mbuf of the pool carries a mark (a dynamic field the daemon
// registers, kLentField): slot + 1 from the moment a pump puts it into that slot's rx or fill
// ring (or a driver's own hands) until it comes back through the slot's tx or free ring, 0
// otherwise (in the pool, in the port, the daemon's). A mark is cleared before every free, so no
// buffer in the pool carries one; when a process dies, the buffers still marked with its slot
// are those it held (its stash, the frames it was working on, those it was done with but had
// not given back yet): reclaim() returns them to the pool.
// Single-threaded per process (one Pump per process; the holder word orders them).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "port/param.hpp"

struct rte_ring;
struct rte_mempool;

namespace uroce::port::service {

// A multicast group of the device's processes: which of them have a QP attached to it. The
// daemon writes it (Msg::Group from each process), whoever moves frames reads it: a datagram to
// the group goes to each member process (a copy each), and one a process sends to the others.
struct GroupEntry {
  std::atomic<uint64_t> members{0};  // a bit per slot; 0: the entry is free
  uint8_t gid[16] = {};
};

// In a memzone of the daemon's (kPumpZone), seen by every attached process.
struct PumpShared {
  std::atomic<uint32_t> holder{0};     // 0: free; slot + 1: that process; kDaemonHolder: the daemon
  std::atomic<uint32_t> drive{0};      // processes may drive now (the daemon says; capture, faults: no)
  std::atomic<uint64_t> live{0};       // a bit per attached slot
  std::atomic<uint64_t> driven_ns{0};  // CLOCK_MONOTONIC when a process last drove
  std::atomic<uint32_t> epoch{0};      // the link's ups and downs (a process drives only in the epoch it began in)
  std::atomic<uint64_t> fill_short{0}; // fill rings left short: the pool had no buffer (Pump::refill)
  std::atomic<uint32_t> share{param::kServiceShareMin};  // buffers a process may hold (param.hpp)
  uint16_t port = 0;                   // the DPDK port and queue 0 of it
  uint8_t mac[6] = {};
  GroupEntry groups[param::kServiceMaxGroups];
  // The members of group `gid` (0: none, or not a group of the table).
  uint64_t members(const uint8_t* gid) const;
  // A process's share of the pool, by ring (param::kServiceShareMin): what its fill ring is
  // topped up to, what its rx ring holds at most, what its tx ring holds before it is lent no more.
  uint32_t fill_target() const {
    const uint32_t f = std::min(share.load(std::memory_order_relaxed) / 4, param::kServiceFill);
    return std::max(f / param::kServiceBurst * param::kServiceBurst, param::kServiceBurst);
  }
  uint32_t rx_cap() const { return std::max(share.load(std::memory_order_relaxed) / 2, 2 * param::kServiceBurst); }
  uint32_t tx_cap() const { return std::max(share.load(std::memory_order_relaxed) / 4, param::kServiceBurst); }
};
inline constexpr uint32_t kDaemonHolder = 0xFFFFFFFFu;
inline constexpr const char* kPumpZone = "uroced_pump";
inline constexpr const char* kDaemonRing = "udmn";  // frames a driver hands the daemon
inline constexpr const char* kLentField = "uroce_lent_to";  // the mbuf dynamic field of the marks

uint64_t monotonic_ns();
void ring_doorbell(int eventfd);  // wakes the daemon (-1: nothing)

// The rings of a slot in the daemon's DPDK memory (rte_ring_lookup), each with one producer and
// one consumer at a time: rx (frames for the process's QPs), tx (frames it sends), fill (empty
// buffers to build frames in), free (buffers it is done with).
struct SlotRings {
  rte_ring *rx = nullptr, *tx = nullptr, *fill = nullptr, *free = nullptr;
};
// The names of slot i's rings in the daemon's memory.
struct SlotRingNames {
  std::string rx, tx, fill, free;
};
SlotRingNames slot_ring_names(uint32_t i);

class Pump {
 public:
  // Frames go to a slot (>= 0), to nobody (kNobody: freed, counted), to the daemon (kDaemon), or
  // to every member process of their multicast group (kGroup: a copy each).
  static constexpr int kNobody = -1, kDaemon = -2, kGroup = -3;
  // Per frame, so a plain function and its context rather than a std::function.
  struct OwnerFn {
    int (*fn)(void* ctx, const uint8_t* frame, uint32_t len) = nullptr;
    void* ctx = nullptr;
    int operator()(const uint8_t* f, uint32_t len) const { return fn(ctx, f, len); }
  };
  // Sends frames to the wire; returns how many it took (the rest stay in their tx ring).
  using WireFn = std::function<size_t(void** mbufs, size_t n)>;

  Pump(PumpShared* shared, std::vector<SlotRings> slots, rte_ring* to_daemon, rte_mempool* pool)
      : sh_(shared), slots_(std::move(slots)), in_(slots_.size()), to_daemon_(to_daemon), pool_(pool) {}

  // The marks' field: registered by the daemon (which clears every mark of `pool`, all of whose
  // buffers are free or the port's then), looked up by a process that drives. false and `err`
  // if it cannot be had (a process then does not drive).
  static bool register_marks(rte_mempool* pool, std::string& err);
  static bool find_marks();
  static void mark(void* const* mbufs, size_t n, uint32_t who);  // who: slot + 1, or 0
  static uint32_t mark_of(const void* mbuf);

  // The port for `who` (slot + 1, or kDaemonHolder), if nobody has it.
  bool try_take(uint32_t who);
  void give_back(uint32_t who);

  // Frames to their owners' rx rings by `owner`, consecutive frames of one owner in one enqueue;
  // those that find no owner or a full ring are freed. Counts into `c`.
  struct Counts {
    uint64_t delivered = 0, no_owner = 0, ring_full = 0, to_daemon = 0;
  };
  // The frames of slot `slot` into `mine` instead of its ring, while `cap` allows (a driver's own).
  struct Mine {
    int slot = kNobody;
    void** mine = nullptr;
    size_t cap = 0;
    size_t* got = nullptr;
  };
  void deliver(void** mbufs, size_t n, const OwnerFn& owner, Counts& c, Mine self);
  void deliver(void** mbufs, size_t n, const OwnerFn& owner, Counts& c) { deliver(mbufs, n, owner, c, Mine()); }
  // Slot i's tx ring: frames to this device's MAC to their owners, the rest to `wire`, in order
  // (a multicast datagram also to the group's other member processes, a copy each); what `wire`
  // does not take stays in the ring, first in line. Returns the frames moved.
  size_t move_tx(uint32_t i, const uint8_t* dev_mac, const WireFn& wire, const OwnerFn& owner, Counts& c,
                 uint64_t* looped = nullptr);
  // Frames process `from` sends, straight from its hands (it holds the port, its tx ring is
  // empty): as move_tx does with the ring's; returns how many were taken.
  size_t out(int from, void** mbufs, size_t n, const uint8_t* dev_mac, const WireFn& wire, const OwnerFn& owner, Counts& c,
             uint64_t* looped = nullptr);
  // Slot i's free ring back to the pool, its fill ring topped up (to param::kServiceFill).
  void refill(uint32_t i);
  // Empties slot i's rings into the pool and resets them (the process is gone).
  void drain(uint32_t i);
  // After a process died holding the port: every ring's and the pool's half-done move undone.
  void repair();
  // The buffers in the mempool cache of EAL lcore `lcore` (a process that is gone) back in the pool.
  void flush_cache(uint32_t lcore);
  // Every buffer of the pool still marked as slot i's back in the pool (slot i is gone and its
  // rings drained; nobody moves buffers meanwhile: the caller holds the port). Returns how many.
  size_t reclaim(uint32_t i);

  // Whether frames went to the daemon since the last call (then ring its doorbell).
  bool take_rang() {
    const bool r = rang_;
    rang_ = false;
    return r;
  }
  PumpShared& shared() { return *sh_; }
  rte_ring* to_daemon() const { return to_daemon_; }
  uint64_t frames_in(uint32_t i) const { return in_[i]; }  // delivered to slot i by this pump since drain(i)
  size_t size() const { return slots_.size(); }

 private:
  // Multicast: the live member processes of the group of datagram `m` (to a group MAC, QP
  // 0xFFFFFF) but `except` (a slot, or kNobody); a copy of it for `slot` (nullptr: no buffer,
  // counted); a frame into slot's rx ring (freed and counted if full); and a received datagram
  // to its members, a copy each but the last, whose slot is returned for the original (kNobody:
  // no member).
  uint64_t group_members(const void* m, int except) const;
  void* copy_for(const void* m, uint32_t slot, Counts& c);
  void give(uint32_t slot, void* m, Counts& c);
  int to_members(void* m, Counts& c);
  size_t move_tx_burst(uint32_t i, const uint8_t* dev_mac, const WireFn& wire, const OwnerFn& owner, Counts& c,
                       uint64_t* looped);
  PumpShared* sh_;
  std::vector<SlotRings> slots_;
  std::vector<uint64_t> in_;
  rte_ring* to_daemon_;
  rte_mempool* pool_;
  bool rang_ = false;
};

}  // namespace uroce::port::service
